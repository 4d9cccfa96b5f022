namespace PersistentServices;

/// <summary>
/// A <see cref="DelegatingHandler"/> that makes any <see cref="HttpClient"/> follow the primaries of replication groups
/// (docs/replication.md, "Clients"): each request to an address of one of the groups goes to the group's node that last
/// served; a node that refuses or drops the connection or answers <c>503</c> problem <c>replica</c> is passed over for
/// the next node of the group, once around; when no node serves, the last replica's <c>503</c> (or the last connection
/// error) is the answer, for the caller's own retries. The message is sent as it is, only its scheme, host and port
/// changed to another node of the same group: never to an address outside it. Requests to other addresses pass as they
/// are. It logs and counts nothing; the .NET client (<c>PersistentClientOptions.ReplicationGroups</c>) and persistent
/// calls (<c>PersistentCallOptions.ReplicationGroups</c>) follow groups by themselves, with log events and a counter.
/// </summary>
public sealed class ReplicationGroupsHandler : DelegatingHandler
{
    private readonly Replication.ReplicationGroupRouter _router;

    /// <summary>
    /// Follows <paramref name="groups"/>: each a list of the base addresses (scheme, host and port, http or https, no path)
    /// of one service's nodes, at least two; a node in one group only.
    /// </summary>
    /// <exception cref="ArgumentException">A group or node is not valid (the message names it: <c>groups[1][0] ...</c>).</exception>
    public ReplicationGroupsHandler(IEnumerable<IEnumerable<Uri>> groups)
    {
        ArgumentNullException.ThrowIfNull(groups);
        var list = groups.Select(g => g?.ToList()).ToList();
        var errors = Replication.ReplicationGroupRouter.Validate(list, nameof(groups)).ToList();
        if (errors.Count > 0)
        {
            throw new ArgumentException(string.Join(" ", errors), nameof(groups));
        }

        _router = new Replication.ReplicationGroupRouter(list!, events: null);
    }

    /// <inheritdoc />
    protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        => _router.SendAsync(request, (message, token) => base.SendAsync(message, token), cancellationToken);

    /// <inheritdoc />
    protected override HttpResponseMessage Send(HttpRequestMessage request, CancellationToken cancellationToken)
        => throw new NotSupportedException("Following a replication group's primary may try several nodes: use SendAsync.");
}
