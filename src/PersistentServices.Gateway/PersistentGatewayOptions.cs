namespace PersistentServices.Gateway;

/// <summary>
/// The gateway's configuration (configuration section <c>PersistentGateway</c>): the services behind it, each with its
/// instances by ordinal, and the bounds of holding (docs/gateway.md). Validated at startup.
/// </summary>
public sealed class PersistentGatewayOptions
{
    /// <summary>The services behind the gateway, by name. At least one.</summary>
    public Dictionary<string, GatewayServiceOptions> Services { get; } = new(StringComparer.Ordinal);

    /// <summary>
    /// How long the gateway holds one request while its instance is unreachable, recovering or answering
    /// <c>503</c>; after it the client gets <c>503 unavailable</c> with <c>Retry-After</c> when no send of it can have run,
    /// else <c>504 outcome-unknown</c> with the identity to resend it under (docs/gateway.md, "Answers"). Default 30 seconds.
    /// </summary>
    public TimeSpan HoldTime { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>The first pause before a held request is resent; it doubles up to <see cref="MaxRetryDelay"/>. Default 50 ms.</summary>
    public TimeSpan RetryDelay { get; set; } = TimeSpan.FromMilliseconds(50);

    /// <summary>The longest pause between two sends of a held request. Default 500 ms.</summary>
    public TimeSpan MaxRetryDelay { get; set; } = TimeSpan.FromMilliseconds(500);

    /// <summary>
    /// The largest request body the gateway accepts (it keeps every body until the reply, to resend it); larger ones get
    /// <c>413</c> before anything is sent. Default 1 MiB, the services' own <c>MaxRequestBodyBytes</c>.
    /// </summary>
    public int MaxRequestBodyBytes { get; set; } = 1 << 20;

    /// <summary>
    /// The most bytes of request bodies the gateway keeps at once, over all requests in flight, taken as the bytes arrive
    /// (a declared <c>Content-Length</c> up front); a request that would exceed it gets <c>503</c> with <c>Retry-After</c>
    /// before anything is sent. Default 64 MiB.
    /// </summary>
    public long MaxBufferedBytes { get; set; } = 64L << 20;

    /// <summary>
    /// The most bytes of request bodies the gateway keeps at once for one client address (an IPv6 client by its /64); a
    /// request that would exceed it gets <c>503</c> with <c>Retry-After</c> before anything is sent, so one client's flood
    /// leaves the rest of <see cref="MaxBufferedBytes"/> to the others. Null (the default): an eighth of
    /// <see cref="MaxBufferedBytes"/>, and at least <see cref="MaxRequestBodyBytes"/>. Behind a load balancer that hides
    /// client addresses every client shares one.
    /// </summary>
    public long? MaxBufferedBytesPerClient { get; set; }

    internal long EffectiveMaxBufferedBytesPerClient => MaxBufferedBytesPerClient ?? Math.Max(MaxBufferedBytes / 8, MaxRequestBodyBytes);

    /// <summary>
    /// The deployment's peer key (the services' <c>PersistentServicesOptions.Calls.PeerKey</c>, at least 32 characters): the
    /// gateway signs the <c>Idempotency-Key</c>s it generates with it, so that a service keeps them apart from clients' own
    /// keys (their own share, forgotten after <c>IdempotencyKeys.GatewayKeyRetention</c>, docs/gateway.md, "Generated keys").
    /// Required when a service is <see cref="GatewayServiceOptions.Persistent"/>. Keep it out of files: an environment
    /// variable or a secret (<c>PersistentGateway__PeerKey</c>).
    /// </summary>
    public string? PeerKey { get; set; }

    /// <summary>
    /// The slowest a client may send a request body, in bytes per second after a 5-second grace (Kestrel's
    /// <c>MinRequestBodyDataRate</c>, which <c>AddPersistentGateway</c> sets): a connection that trickles slower is closed,
    /// and the bytes it had taken from <see cref="MaxBufferedBytes"/> are freed. Default 4096.
    /// </summary>
    public double MinRequestBodyDataRate { get; set; } = 4096;

    /// <summary>
    /// Whether the gateway forwards the services' control plane from its clients: <c>/ps/replication/*</c> (shipments,
    /// promotions, switchovers, a node's status), <c>/ps/consensus</c> (Raft) and <c>/ps/domain/*</c> (a service domain's
    /// flush and recovery messages), whatever the path prefix and the spelling's case. These are for the deployment's own
    /// nodes and operators, who reach the nodes directly; they are signed with the peer key, and still should not be
    /// reachable by anyone who can reach the gateway. False (the default): answered <c>404</c> problem
    /// <c>gateway-control-plane</c> and never sent (docs/gateway.md, "The control plane").
    /// </summary>
    public bool ForwardControlPlane { get; set; }

    /// <summary>How long the gateway waits for a TCP connection to an instance. Default 2 seconds.</summary>
    public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>
    /// How long a node of a replication group (an instance with several addresses) may keep a request the gateway may send
    /// again without answering or sending a byte: after it, the gateway sends the request, with the same identity, to the
    /// group's next node, and takes the first answer (docs/gateway.md, "Replicas"). A hung primary (paused, cut off, stalled)
    /// accepts connections and answers nothing; without this, its requests waited for it to resume or die. Safe because the
    /// identity makes the resend run at most once: a primary still executing it answers the resend once it is done. Raise it
    /// above the slowest persistent endpoint's time to first byte, or each such request is also asked of the other nodes;
    /// a reply that pauses longer between its bytes is cut (YARP's activity timeout, which this sets for such requests).
    /// Default 1 second.
    /// </summary>
    public TimeSpan NodeResponseTimeout { get; set; } = TimeSpan.FromSeconds(1);
}

/// <summary>One service behind the gateway.</summary>
public sealed class GatewayServiceOptions
{
    /// <summary>
    /// The path prefix that selects this service (<c>/store</c>): it is removed before the request is forwarded. Empty (the
    /// default) matches every path; at most one service may have it. The longest matching prefix wins.
    /// </summary>
    public string PathPrefix { get; set; } = "";

    /// <summary>
    /// The service's instances: ordinal (0 to 255, the instance's <c>PersistentServicesOptions.InstanceOrdinal</c>) to base
    /// address (<c>http://store-2.store:8080</c>). At least one.
    /// </summary>
    public Dictionary<string, string> Instances { get; } = new(StringComparer.Ordinal);

    /// <summary>
    /// The operator's statement that every endpoint of this service reached through the gateway with a method other than
    /// GET, HEAD, OPTIONS or TRACE is <c>[Persistent]</c> (honours <c>PS-Session</c>/<c>PS-Seq</c> and
    /// <c>Idempotency-Key</c>), except the paths in <see cref="PlainPaths"/>. Only then does the gateway give a request
    /// without an identity an <c>Idempotency-Key</c>, and resend a request that may have executed. Default false: only
    /// requests that provably never reached the instance, or that the service answered <c>503 unavailable</c> or
    /// <c>reply-pending</c>, are resent (docs/gateway.md, "The resend rule").
    /// </summary>
    public bool Persistent { get; set; }

    /// <summary>Path prefixes (after <see cref="PathPrefix"/> is removed) of this service's endpoints that are not persistent.</summary>
    public List<string> PlainPaths { get; } = [];

    /// <summary>
    /// Ordinals of instances being scaled in: they get no new sessions and no requests without an identity; their sessions
    /// and the Idempotency-Keys that hash to them still go to them until they end or expire (docs/gateway.md, "Instances").
    /// At least one instance must stay out of this list.
    /// </summary>
    public List<string> DrainingInstances { get; } = [];

    /// <summary>The service's session resource (its <c>PersistentServicesOptions.SessionsPath</c>). Default <c>/ps/sessions</c>.</summary>
    public string SessionsPath { get; set; } = "/ps/sessions";
}
