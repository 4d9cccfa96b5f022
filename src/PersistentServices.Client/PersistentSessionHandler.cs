namespace PersistentServices.Client;

/// <summary>
/// The <see cref="DelegatingHandler"/> <c>AddPersistentSessions</c> puts into a named client's chain: every request goes
/// through <see cref="PersistentSessionClient"/>; the resilience handler after it retries each attempt with the same ids.
/// </summary>
internal sealed class PersistentSessionHandler(PersistentSessionClient client) : DelegatingHandler
{
    protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        => client.SendAsync(request, (message, ct) => base.SendAsync(message, ct), cancellationToken);

    protected override HttpResponseMessage Send(HttpRequestMessage request, CancellationToken cancellationToken)
        => throw new NotSupportedException("Persistent sessions store and retry requests asynchronously: use SendAsync.");
}

/// <summary>
/// The innermost handler <c>AddPersistentSessions</c> adds, inside the resilience pipeline: each attempt to an address of
/// a replication group goes to the group's serving node (<see cref="Replication.ReplicationGroupRouter"/>, in PersistentServices.Core); other requests pass as they are.
/// </summary>
internal sealed class ReplicationGroupHandler(PersistentSessionClient client) : DelegatingHandler
{
    protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        => client.Groups.SendAsync(request, (message, ct) => base.SendAsync(message, ct), cancellationToken);

    protected override HttpResponseMessage Send(HttpRequestMessage request, CancellationToken cancellationToken)
        => throw new NotSupportedException("Persistent sessions store and retry requests asynchronously: use SendAsync.");
}
