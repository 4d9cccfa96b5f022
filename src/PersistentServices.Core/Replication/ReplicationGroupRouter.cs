using System.Net;
using System.Runtime.ExceptionServices;
using System.Text.Json;

namespace PersistentServices.Replication;

/// <summary>
/// What a <see cref="ReplicationGroupRouter"/>'s owner logs and counts (the client package, persistent calls: each with
/// its own event ids and meter). The router calls it; it never throws.
/// </summary>
internal interface IReplicationGroupEvents
{
    /// <summary>Node <paramref name="node"/> of <paramref name="group"/> did not serve an attempt (<paramref name="reason"/>): the next node is tried.</summary>
    void PassedOver(string node, string group, string reason);

    /// <summary><paramref name="node"/> served, where <paramref name="previous"/> (or no node yet: null) served before.</summary>
    void ServingChanged(string node, string group, string? previous);

    /// <summary>No node of <paramref name="group"/> served an attempt (each node's reason, <paramref name="reasons"/>): the caller's retry pipeline goes on.</summary>
    void NoneServed(string group, string reasons);
}

/// <summary>
/// One replication group of a router: its nodes' base addresses and the node requests go to now, the one that last served
/// (a hint in memory only: a new process finds the primary again by trying the nodes in turn, starting with each request's
/// own node), as the gateway's <c>GatewayInstance</c> keeps it.
/// </summary>
internal sealed class ReplicationGroup(int index, IReadOnlyList<string> nodes)
{
    /// <summary>Where the next round starts: the node that last served, moved on past each node passed over since.</summary>
    private int _current = -1;

    /// <summary>The node that last served (for telling when that changes).</summary>
    private int _served = -1;

    public int Index { get; } = index;

    /// <summary>The nodes' base addresses (<see cref="ReplicationGroupRouter.Authority"/>), in their configured order.</summary>
    public IReadOnlyList<string> Nodes { get; } = nodes;

    /// <summary>The node requests go to first now, or null while no request went to the group (one then starts at its own node).</summary>
    public string? Current => Volatile.Read(ref _current) is var current and >= 0 ? Nodes[current] : null;

    /// <summary>Where a round for a request to <paramref name="own"/> (a node of this group) starts.</summary>
    public int Start(string own)
    {
        var current = Volatile.Read(ref _current);
        return current >= 0 ? current : IndexOf(own);
    }

    /// <summary>
    /// Node <paramref name="index"/> refused, dropped or timed out, or answered that it is a replica: the next node is where
    /// requests start, unless another request moved the group on already.
    /// </summary>
    public void PassOver(int index)
    {
        var current = Volatile.Read(ref _current);
        if (current == index || current < 0)
        {
            Interlocked.CompareExchange(ref _current, (index + 1) % Nodes.Count, current);
        }
    }

    /// <summary>Node <paramref name="index"/> served: requests start there. True when another node (or none) served before: <paramref name="previous"/>.</summary>
    public bool Served(int index, out string? previous)
    {
        Volatile.Write(ref _current, index);
        var was = Interlocked.Exchange(ref _served, index);
        previous = was >= 0 ? Nodes[was] : null;
        return was != index;
    }

    public int IndexOf(string authority)
    {
        for (var i = 0; i < Nodes.Count; i++)
        {
            if (string.Equals(Nodes[i], authority, StringComparison.OrdinalIgnoreCase))
            {
                return i;
            }
        }

        return -1;
    }

    public override string ToString() => string.Join(", ", Nodes);
}

/// <summary>
/// The one implementation of following a replication group's primary (docs/replication.md, "Clients"), used by the .NET
/// client (<c>PersistentClientOptions.ReplicationGroups</c>), by persistent calls between services
/// (<c>PersistentCallOptions.ReplicationGroups</c>) and by <see cref="PersistentServices.ReplicationGroupsHandler"/>. Each attempt of a
/// request to an address of a group goes to the group's node that serves: inside the caller's resilience pipeline, once
/// per attempt, so the pipeline's retries and backoff are the only retry loop; an attempt goes once around the group at
/// most. The request message is the attempt's own (its session, number, headers, signature and buffered body): only its
/// address changes, to another node of the same group, never to any other address.
/// </summary>
internal sealed class ReplicationGroupRouter
{
    private const string ReplicaProblem = "urn:persistentservices:problem:replica";
    private const string ProblemMediaType = "application/problem+json";

    /// <summary>A problem's body is small; a larger 503 is not a replica's (and is not buffered to find out).</summary>
    private const int MaxProblemBytes = 16 * 1024;

    private readonly Dictionary<string, ReplicationGroup> _byNode = new(StringComparer.OrdinalIgnoreCase);
    private readonly IReplicationGroupEvents? _events;

    /// <summary>A router for <paramref name="groups"/> (validated already: <see cref="Validate"/>), telling <paramref name="events"/> what it does.</summary>
    public ReplicationGroupRouter(IEnumerable<IEnumerable<Uri>> groups, IReplicationGroupEvents? events)
    {
        _events = events;
        foreach (var nodes in groups)
        {
            var group = new ReplicationGroup(Groups.Count, [.. nodes.Select(Authority)]);
            Groups.Add(group);
            foreach (var node in group.Nodes)
            {
                _byNode[node] = group;
            }
        }
    }

    public List<ReplicationGroup> Groups { get; } = [];

    /// <summary>The scheme, host and port of <paramref name="address"/>, as nodes are keyed (default ports left out).</summary>
    public static string Authority(Uri address) => address.GetLeftPart(UriPartial.Authority);

    /// <summary>Why <paramref name="address"/> is not a node's base address, or null.</summary>
    public static string? NodeError(Uri? address)
    {
        if (address is null)
        {
            return "is empty (a configuration key without a value): give the node's base address.";
        }

        if (!address.IsAbsoluteUri || address.Scheme is not ("http" or "https"))
        {
            return $"must be an absolute http or https address (was '{address}').";
        }

        if (address.AbsolutePath != "/" || address.Query.Length > 0 || address.Fragment.Length > 0 || address.UserInfo.Length > 0)
        {
            return $"must be a base address, scheme, host and port only: no path, query, fragment or user (was '{address}').";
        }

        return null;
    }

    /// <summary>
    /// What is wrong with <paramref name="groups"/>, each message naming the option (<paramref name="option"/>, e.g.
    /// <c>PersistentClientOptions.ReplicationGroups</c>) and the group and node: each group at least 2 nodes, each an
    /// absolute http(s) base address, no node listed twice or in two groups.
    /// </summary>
    public static IEnumerable<string> Validate(IEnumerable<IEnumerable<Uri?>?> groups, string option)
    {
        var owner = new Dictionary<string, int>(StringComparer.OrdinalIgnoreCase);
        var g = -1;
        foreach (var nodes in groups)
        {
            g++;
            var group = nodes?.ToList();
            if (group is null || group.Count < 2)
            {
                yield return $"{option}[{g}] must list at least 2 node addresses (had {group?.Count ?? 0}): a group is a primary and its replicas.";
                continue;
            }

            for (var n = 0; n < group.Count; n++)
            {
                var address = group[n];
                if (NodeError(address) is { } error)
                {
                    yield return $"{option}[{g}][{n}] {error}";
                    continue;
                }

                var authority = Authority(address!);
                if (owner.TryGetValue(authority, out var other))
                {
                    yield return other == g
                        ? $"{option}[{g}] lists {authority} twice."
                        : $"{option}[{g}] and [{other}] both list {authority}: a node belongs to one group.";
                    continue;
                }

                owner[authority] = g;
            }
        }
    }

    /// <summary>The group <paramref name="address"/> belongs to, or null.</summary>
    public ReplicationGroup? Find(Uri address)
        => _byNode.Count > 0 && address.IsAbsoluteUri && _byNode.TryGetValue(Authority(address), out var group) ? group : null;

    /// <summary>
    /// An exception that means no answer from the node (refused, reset, unreachable, the reply cut off), so the next node
    /// may be the primary: an <see cref="HttpRequestException"/> without a status, or the bare
    /// <see cref="System.Net.Sockets.SocketException"/> or <see cref="IOException"/> SocketsHttpHandler lets escape when a
    /// socket closes while the connection is set up.
    /// </summary>
    private static bool IsNoAnswer(Exception exception)
        => exception is HttpRequestException { StatusCode: null } or System.Net.Sockets.SocketException or IOException;

    /// <summary>One attempt of <paramref name="request"/>: at its group's serving node, once around the group; or as it is, outside any group.</summary>
    public async Task<HttpResponseMessage> SendAsync(
        HttpRequestMessage request, Func<HttpRequestMessage, CancellationToken, Task<HttpResponseMessage>> inner, CancellationToken cancellationToken)
    {
        if (request.RequestUri is not { } address || Find(address) is not { } group)
        {
            return await inner(request, cancellationToken).ConfigureAwait(false);
        }

        var start = group.Start(Authority(address));
        HttpResponseMessage? replica = null;
        ExceptionDispatchInfo? failure = null;
        var reasons = new List<string>(group.Nodes.Count);
        for (var tried = 0; tried < group.Nodes.Count; tried++)
        {
            var index = (start + tried) % group.Nodes.Count;
            var node = group.Nodes[index];
            request.RequestUri = OnNode(request.RequestUri!, node);
            HttpResponseMessage response;
            try
            {
                response = await inner(request, cancellationToken).ConfigureAwait(false);
            }
            catch (Exception ex) when (IsNoAnswer(ex) && !cancellationToken.IsCancellationRequested)
            {
                // No answer from this node: the next node may be the primary. The same message (session and number, or call
                // id) goes there, so the request runs once whichever node has it.
                failure = ExceptionDispatchInfo.Capture(ex);
                var reason = ex is HttpRequestException http ? http.HttpRequestError.ToString() : ex.GetType().Name;
                reasons.Add($"{node}: {reason}");
                group.PassOver(index);
                _events?.PassedOver(node, group.ToString(), reason);
                continue;
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                // The attempt's timeout (or the caller) cancelled it with no answer from this node: the pipeline's next attempt
                // starts at the next node, so a node that neither answers nor refuses does not hold the group.
                group.PassOver(index);
                _events?.PassedOver(node, group.ToString(), "no answer before the attempt ended");
                replica?.Dispose();
                throw;
            }

            if (await IsReplicaAsync(response, cancellationToken).ConfigureAwait(false))
            {
                // A replica executed nothing; the next node may be the primary. Kept in case none serves: its 503 and
                // Retry-After go to the pipeline, which waits and starts the next round.
                replica?.Dispose();
                replica = response;
                reasons.Add($"{node}: replica");
                group.PassOver(index);
                _events?.PassedOver(node, group.ToString(), "replica");
                continue;
            }

            replica?.Dispose();
            if (group.Served(index, out var previous))
            {
                _events?.ServingChanged(node, group.ToString(), previous);
            }

            return response;
        }

        _events?.NoneServed(group.ToString(), string.Join("; ", reasons));
        if (replica is not null)
        {
            return replica;
        }

        failure!.Throw();
        throw new InvalidOperationException("unreachable");
    }

    /// <summary><paramref name="address"/> with the scheme, host and port of <paramref name="node"/>; its path and query kept.</summary>
    private static Uri OnNode(Uri address, string node)
        => string.Equals(Authority(address), node, StringComparison.OrdinalIgnoreCase) ? address : new Uri(node + address.PathAndQuery);

    private static async Task<bool> IsReplicaAsync(HttpResponseMessage response, CancellationToken cancellationToken)
    {
        if (response.StatusCode != HttpStatusCode.ServiceUnavailable ||
            response.Content.Headers.ContentType?.MediaType != ProblemMediaType ||
            response.Content.Headers.ContentLength is null or > MaxProblemBytes)
        {
            return false;
        }

        // Buffered: whoever gets this response reads the same bytes.
        await response.Content.LoadIntoBufferAsync(MaxProblemBytes, cancellationToken).ConfigureAwait(false);
        var body = await response.Content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var document = JsonDocument.Parse(body);
            return document.RootElement.ValueKind == JsonValueKind.Object &&
                   document.RootElement.TryGetProperty("type", out var type) && type.ValueKind == JsonValueKind.String &&
                   type.GetString() == ReplicaProblem;
        }
        catch (JsonException)
        {
            return false;
        }
    }
}
