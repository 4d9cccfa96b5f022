using System.Buffers.Binary;
using System.Buffers.Text;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;
using Microsoft.AspNetCore.Http;

namespace PersistentServices.Gateway;

/// <summary>
/// One instance of a service: its ordinal (the first byte of the session ids it starts) and its base address, or the
/// addresses of the nodes of its replication group (docs/replication.md): a primary and its replicas, one of which serves
/// at a time. <see cref="Address"/> is the node the gateway sends to now: the one that last served, a hint kept in memory
/// only (a new gateway finds the primary again by trying the nodes in turn).
/// </summary>
internal sealed class GatewayInstance(byte Ordinal, IReadOnlyList<string> Nodes)
{
    private int _current;

    public GatewayInstance(byte ordinal, string address)
        : this(ordinal, [.. address.Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries).Select(a => a.TrimEnd('/'))])
    {
    }

    public byte Ordinal { get; } = Ordinal;

    /// <summary>The node addresses: one, or the nodes of a replication group.</summary>
    public IReadOnlyList<string> Nodes { get; } = Nodes;

    /// <summary>The node requests go to now.</summary>
    public string Address => Nodes[Volatile.Read(ref _current) % Nodes.Count];

    /// <summary>
    /// <paramref name="address"/> refused the connection or answered that it is a replica: the next node of the group is
    /// tried (unless another request moved on already). True when there is another node to try.
    /// </summary>
    public bool NextNode(string address)
    {
        if (Nodes.Count < 2)
        {
            return false;
        }

        var current = Volatile.Read(ref _current);
        if (Nodes[current % Nodes.Count] == address)
        {
            Interlocked.CompareExchange(ref _current, (current + 1) % Nodes.Count, current);
        }

        return true;
    }
}

/// <summary>How a request is placed on an instance (docs/gateway.md, "Routing").</summary>
internal enum Placement
{
    /// <summary>A session's request (<c>PS-Session</c>, or <c>DELETE {sessions}/{id}</c>): its owner, named by the id.</summary>
    Session,

    /// <summary>An <c>Idempotency-Key</c> request: the instance the key hashes to (rendezvous hashing).</summary>
    Key,

    /// <summary><c>POST {sessions}</c>: round-robin; it executes nothing, so it may move to another instance.</summary>
    SessionStart,

    /// <summary>No identity: round-robin; moves to another instance only while it never reached one.</summary>
    Unkeyed,

    /// <summary>A session id whose owner byte names no configured instance.</summary>
    UnknownOwner,
}

/// <summary>A routing decision: the placement and, except for <see cref="Placement.UnknownOwner"/>, the instance.</summary>
internal readonly record struct RouteDecision(Placement Placement, GatewayInstance? Instance);

/// <summary>One service behind the gateway, ready for routing (built once from <see cref="GatewayServiceOptions"/>).</summary>
internal sealed class GatewayService
{
    private readonly Dictionary<byte, GatewayInstance> _byOrdinal;
    private int _next = -1;

    public GatewayService(string name, GatewayServiceOptions options)
    {
        Name = name;
        PathPrefix = options.PathPrefix;
        SessionsPath = options.SessionsPath;
        Persistent = options.Persistent;
        PlainPaths = [.. options.PlainPaths];
        Instances = [.. options.Instances
            .Select(i => new GatewayInstance(byte.Parse(i.Key, NumberStyles.None, CultureInfo.InvariantCulture), i.Value))
            .OrderBy(i => i.Ordinal)];
        _byOrdinal = Instances.ToDictionary(i => i.Ordinal);
        var draining = options.DrainingInstances.Select(d => byte.Parse(d, NumberStyles.None, CultureInfo.InvariantCulture)).ToHashSet();
        Accepting = [.. Instances.Where(i => !draining.Contains(i.Ordinal))];
    }

    /// <summary>The instances that take new sessions and requests without an identity (all but the draining ones).</summary>
    public IReadOnlyList<GatewayInstance> Accepting { get; }

    public string Name { get; }

    public string PathPrefix { get; }

    public string SessionsPath { get; }

    public bool Persistent { get; }

    public IReadOnlyList<string> PlainPaths { get; }

    public IReadOnlyList<GatewayInstance> Instances { get; }

    /// <summary>Whether the service honours <c>PS-Seq</c> and <c>Idempotency-Key</c> on <paramref name="path"/> (operator's statement).</summary>
    public bool HonoursIdentity(string path)
        => Persistent && !PlainPaths.Any(p => path.Equals(p, StringComparison.OrdinalIgnoreCase) || path.StartsWith(p + "/", StringComparison.OrdinalIgnoreCase));

    /// <summary>Decides where a request goes. <paramref name="path"/> is the path without the service's prefix.</summary>
    public RouteDecision Route(string method, string path, string? session, string? idempotencyKey)
    {
        if (session is not null)
        {
            return Owner(session);
        }

        if (HttpMethods.IsDelete(method) && path.StartsWith(SessionsPath + "/", StringComparison.OrdinalIgnoreCase))
        {
            return Owner(path[(SessionsPath.Length + 1)..]);
        }

        if (idempotencyKey is not null)
        {
            return new RouteDecision(Placement.Key, ForKey(idempotencyKey));
        }

        return HttpMethods.IsPost(method) && path.Equals(SessionsPath, StringComparison.OrdinalIgnoreCase)
            ? new RouteDecision(Placement.SessionStart, NextInstance())
            : new RouteDecision(Placement.Unkeyed, NextInstance());
    }

    /// <summary>The next instance that accepts new work, in round-robin order.</summary>
    public GatewayInstance NextInstance()
        => Accepting[(int)((uint)Interlocked.Increment(ref _next) % (uint)Accepting.Count)];

    /// <summary>The instance for a key the gateway generated: rendezvous hashing over the instances that accept new work.</summary>
    public GatewayInstance ForNewKey(string key) => ForKey(key, Accepting);

    /// <summary>
    /// The instance a key belongs to: the one with the highest score hash(key, ordinal) (rendezvous hashing). Adding an
    /// instance moves only the keys it now wins; removing one moves only its own keys (docs/gateway.md).
    /// </summary>
    public GatewayInstance ForKey(string key) => ForKey(key, Instances);

    private static GatewayInstance ForKey(string key, IReadOnlyList<GatewayInstance> instances)
    {
        var keyHash = KeyHash(key);
        GatewayInstance? best = null;
        ulong bestScore = 0;
        foreach (var instance in instances)
        {
            var score = Mix(keyHash ^ Mix(instance.Ordinal + 1UL));
            if (best is null || score > bestScore)
            {
                (best, bestScore) = (instance, score);
            }
        }

        return best!;
    }

    /// <summary>The owner ordinal in a session id's first byte, or null for text that is not a session id (22 base64url characters).</summary>
    public static byte? OwnerOrdinal(ReadOnlySpan<char> sessionId)
    {
        Span<byte> bytes = stackalloc byte[16];
        return sessionId.Length == 22 && Base64Url.IsValid(sessionId) && Base64Url.DecodeFromChars(sessionId, bytes) == 16 ? bytes[0] : null;
    }

    private RouteDecision Owner(string sessionId)
    {
        if (OwnerOrdinal(sessionId) is not { } ordinal)
        {
            // Not a session id: the service answers 400 (session-header); any instance will do, the same one each time.
            return new RouteDecision(Placement.Session, ForKey(sessionId));
        }

        if (_byOrdinal.TryGetValue(ordinal, out var owner))
        {
            return new RouteDecision(Placement.Session, owner);
        }

        // A service of one instance may have started its sessions without an ordinal (random first byte): all are its own.
        return Instances.Count == 1 ? new RouteDecision(Placement.Session, Instances[0]) : new RouteDecision(Placement.UnknownOwner, null);
    }

    private static ulong KeyHash(string key)
    {
        Span<byte> hash = stackalloc byte[32];
        SHA256.HashData(Encoding.UTF8.GetBytes(key), hash);
        return BinaryPrimitives.ReadUInt64BigEndian(hash);
    }

    /// <summary>The splitmix64 finalizer: a fixed, well-spread 64-bit mix (the same in every gateway copy).</summary>
    private static ulong Mix(ulong z)
    {
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
        return z ^ (z >> 31);
    }
}

/// <summary>The services behind the gateway, matched by path prefix (the longest wins).</summary>
internal sealed class GatewayTopology
{
    private readonly GatewayService[] _services;

    public GatewayTopology(PersistentGatewayOptions options)
        => _services = [.. options.Services.Select(s => new GatewayService(s.Key, s.Value)).OrderByDescending(s => s.PathPrefix.Length)];

    /// <summary>The service whose prefix matches <paramref name="path"/>, and the path without that prefix.</summary>
    public (GatewayService? Service, string Path) Match(string path)
    {
        foreach (var service in _services)
        {
            var prefix = service.PathPrefix;
            if (prefix.Length == 0)
            {
                return (service, path.Length == 0 ? "/" : path);
            }

            if (path.StartsWith(prefix, StringComparison.OrdinalIgnoreCase) && (path.Length == prefix.Length || path[prefix.Length] == '/'))
            {
                var rest = path[prefix.Length..];
                return (service, rest.Length == 0 ? "/" : rest);
            }
        }

        return (null, path);
    }
}
