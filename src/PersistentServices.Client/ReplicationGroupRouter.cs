using System.Net;
using System.Runtime.ExceptionServices;
using System.Text.Json;
using Microsoft.Extensions.Logging;

namespace PersistentServices.Client;

/// <summary>
/// One replication group of <see cref="PersistentClientOptions.ReplicationGroups"/>: its nodes' base addresses and the
/// node requests go to now, the one that last served (a hint in memory only: a new process finds the primary again by
/// trying the nodes in turn, starting with each request's own node), as the gateway's <c>GatewayInstance</c> keeps it.
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
/// Sends each attempt of a request to an address of a replication group to the group's node that serves (docs/client.md,
/// "Replication groups"): inside the resilience pipeline, once per attempt, so the pipeline's retries and backoff are the
/// only retry loop; an attempt goes once around the group at most. The request message is the attempt's own (its session,
/// number and buffered body): only its address changes, to another node of the same group, never to any other address.
/// </summary>
internal sealed class ReplicationGroupRouter
{
    private const string ReplicaProblem = PersistentSessionClient.ProblemPrefix + "replica";
    private const string ProblemMediaType = "application/problem+json";

    /// <summary>A problem's body is small; a larger 503 is not a replica's (and is not buffered to find out).</summary>
    private const int MaxProblemBytes = 16 * 1024;

    private readonly Dictionary<string, ReplicationGroup> _byNode = new(StringComparer.OrdinalIgnoreCase);
    private readonly ILogger _logger;
    private readonly ClientMetrics _metrics;
    private readonly string _client;

    public ReplicationGroupRouter(IList<IList<Uri>> groups, ILogger logger, ClientMetrics metrics, string client)
    {
        _logger = logger;
        _metrics = metrics;
        _client = client;
        for (var g = 0; g < groups.Count; g++)
        {
            var group = new ReplicationGroup(g, [.. groups[g].Select(Authority)]);
            Groups.Add(group);
            foreach (var node in group.Nodes)
            {
                _byNode[node] = group;
            }
        }
    }

    public List<ReplicationGroup> Groups { get; } = [];

    /// <summary>The scheme, host and port of <paramref name="address"/>, as the client keys services (default ports left out).</summary>
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

    /// <summary>The group <paramref name="address"/> belongs to, or null.</summary>
    public ReplicationGroup? Find(Uri address)
        => _byNode.Count > 0 && address.IsAbsoluteUri && _byNode.TryGetValue(Authority(address), out var group) ? group : null;

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
            catch (HttpRequestException ex) when (ex.StatusCode is null && !cancellationToken.IsCancellationRequested)
            {
                // No answer from this node (refused, reset, unreachable, the reply cut off): the next node may be the primary.
                // The same session and number go there, so the request runs once whichever node has it.
                failure = ExceptionDispatchInfo.Capture(ex);
                reasons.Add($"{node}: {ex.HttpRequestError}");
                group.PassOver(index);
                ClientEvents.NodePassedOver(_logger, node, group.ToString(), ex.HttpRequestError.ToString());
                continue;
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                // The attempt's timeout (or the caller) cancelled it with no answer from this node: the pipeline's next attempt
                // starts at the next node, so a node that neither answers nor refuses does not hold the group.
                group.PassOver(index);
                ClientEvents.NodePassedOver(_logger, node, group.ToString(), "no answer before the attempt ended");
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
                ClientEvents.NodePassedOver(_logger, node, group.ToString(), "replica");
                continue;
            }

            replica?.Dispose();
            if (group.Served(index, out var previous))
            {
                ClientEvents.NodeServing(_logger, node, group.ToString(), previous ?? "none");
                _metrics.NodeChanges.Add(1, ClientMetrics.Tag(_client), new KeyValuePair<string, object?>("node", node));
            }

            return response;
        }

        ClientEvents.NoNodeServing(_logger, group.ToString(), string.Join("; ", reasons));
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
