using System.Net;
using System.Runtime.ExceptionServices;
using System.Text.Json;

namespace Bookstore.Services;

/// <summary>
/// The replication groups of a deployment (<c>--replicas N</c>, README.md "Replicas"): each a service's log nodes, the
/// primary and its replicas, by base address. Written as <c>http://127.0.0.1:5001,http://127.0.0.1:5002;http://…</c>
/// (nodes separated by commas, groups by semicolons: configuration key <c>Bookstore:ReplicationGroups</c>).
/// </summary>
internal sealed class ReplicationGroups
{
    private readonly Dictionary<string, Group> _byNode = new(StringComparer.OrdinalIgnoreCase);

    public ReplicationGroups(IEnumerable<IReadOnlyList<Uri>> groups)
    {
        foreach (var nodes in groups)
        {
            var group = new Group([.. nodes.Select(Authority)]);
            foreach (var node in group.Nodes)
            {
                _byNode[node] = group;
            }
        }
    }

    public static ReplicationGroups None { get; } = new([]);

    public bool IsEmpty => _byNode.Count == 0;

    public static ReplicationGroups Parse(string? text)
        => new((text ?? "").Split(';', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
            .Select(group => (IReadOnlyList<Uri>)[.. group.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(n => new Uri(n))]));

    public static string Format(IEnumerable<IReadOnlyList<Uri>> groups)
        => string.Join(';', groups.Select(g => string.Join(',', g.Select(Authority))));

    /// <summary>The group <paramref name="address"/> is a node of, or null.</summary>
    public Group? Find(Uri address) => address.IsAbsoluteUri && _byNode.TryGetValue(Authority(address), out var group) ? group : null;

    private static string Authority(Uri address) => address.GetLeftPart(UriPartial.Authority);

    /// <summary>One group's nodes and the one that served last (a hint in memory: a new process finds the primary again by trying them).</summary>
    internal sealed class Group(IReadOnlyList<string> nodes)
    {
        private int _current;

        public IReadOnlyList<string> Nodes => nodes;

        public int Current => Volatile.Read(ref _current);

        public void PassOver(int index) => Interlocked.CompareExchange(ref _current, (index + 1) % nodes.Count, index);

        public void Served(int index) => Volatile.Write(ref _current, index);
    }
}

/// <summary>
/// Sends each request to an address of a replication group to the group's node that serves (README.md "Replicas"), as
/// ps-gateway and the .NET client do (docs/gateway.md "Replicas", docs/client.md): a node that refuses the connection or
/// answers <c>503</c> with the problem type <c>replica</c> (a replica executes nothing) is passed over for the next node,
/// once around the group; then the last replica's <c>503</c> (or the last connection error) goes back to the caller,
/// whose own retry loop resends the same request (the same session and number, or the same persistent call) later.
/// The request message is sent as it is, with only its host and port changed, so a persistent call's signature (which
/// covers the path, not the host) holds on every node. Innermost: after <c>AddPersistentCalls()</c>, it sees each attempt.
/// The library's calls between services do not follow a primary by themselves yet (docs/replication.md, "Not yet"): this
/// handler is the bookstore's own.
/// </summary>
internal sealed class FollowPrimaryHandler(ReplicationGroups groups) : DelegatingHandler
{
    private const string ReplicaProblem = "urn:persistentservices:problem:replica";
    private const int MaxProblemBytes = 16 * 1024;

    protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
    {
        if (request.RequestUri is not { } address || groups.Find(address) is not { } group)
        {
            return await base.SendAsync(request, cancellationToken);
        }

        var start = group.Current;
        HttpResponseMessage? replica = null;
        ExceptionDispatchInfo? failure = null;
        for (var tried = 0; tried < group.Nodes.Count; tried++)
        {
            var index = (start + tried) % group.Nodes.Count;
            request.RequestUri = new Uri(group.Nodes[index] + address.PathAndQuery);
            HttpResponseMessage response;
            try
            {
                response = await base.SendAsync(request, cancellationToken);
            }
            catch (HttpRequestException ex) when (ex.StatusCode is null && !cancellationToken.IsCancellationRequested)
            {
                // No answer from this node (killed, restarting): the next one may be the primary; the same request runs once wherever.
                failure = ExceptionDispatchInfo.Capture(ex);
                group.PassOver(index);
                continue;
            }

            if (await IsReplicaAsync(response, cancellationToken))
            {
                replica?.Dispose();
                replica = response;
                group.PassOver(index);
                continue;
            }

            replica?.Dispose();
            group.Served(index);
            return response;
        }

        if (replica is not null)
        {
            return replica;
        }

        failure!.Throw();
        throw new InvalidOperationException("unreachable");
    }

    private static async Task<bool> IsReplicaAsync(HttpResponseMessage response, CancellationToken cancellationToken)
    {
        if (response.StatusCode != HttpStatusCode.ServiceUnavailable ||
            response.Content.Headers.ContentType?.MediaType != "application/problem+json" ||
            response.Content.Headers.ContentLength is null or > MaxProblemBytes)
        {
            return false;
        }

        await response.Content.LoadIntoBufferAsync(MaxProblemBytes, cancellationToken);
        try
        {
            using var document = JsonDocument.Parse(await response.Content.ReadAsByteArrayAsync(cancellationToken));
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
