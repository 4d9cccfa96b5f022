using PersistentServices.Log;

namespace PersistentServices;

/// <summary>Options of <c>AddPersistentServices</c>. Validated when the host starts.</summary>
public sealed class PersistentServicesOptions
{
    /// <summary>Directory of the service's log (one log per service process; keep it on a persistent volume). Required.</summary>
    public string LogDirectory { get; set; } = "";

    /// <summary>Largest request body of a persistent endpoint, in bytes; larger requests get 413 before anything is logged. Default 1 MiB.</summary>
    public int MaxRequestBodyBytes { get; set; } = 1 << 20;

    /// <summary>Largest total size of the request headers, query and principal claims that are logged, in bytes; larger get 431. Default 32 KiB.</summary>
    public int MaxLoggedHeaderBytes { get; set; } = 32 << 10;

    /// <summary>A session with no request for this long ends and releases its memory. Default 1 hour.</summary>
    public TimeSpan SessionIdleRetention { get; set; } = TimeSpan.FromHours(1);

    /// <summary>
    /// A session that has not received its first request this long after it started ends, freeing its slot, so sessions
    /// opened and never used (a flood of starts) do not hold slots for <see cref="SessionIdleRetention"/>. Default 1 minute;
    /// at most <see cref="SessionIdleRetention"/>.
    /// </summary>
    public TimeSpan UnusedSessionRetention { get; set; } = TimeSpan.FromMinutes(1);

    /// <summary>
    /// The claim that identifies an authenticated principal as the owner of its sessions and Idempotency-Keys, for
    /// principals without a <see cref="System.Security.Claims.ClaimTypes.NameIdentifier"/>, <c>sub</c> or name claim (an
    /// API-key handler's principal with only <c>client_id</c>, say). When set, it is the only claim used. An authenticated
    /// principal that no claim identifies is refused (<c>403 owner-unidentified</c>), never treated as anonymous: it would
    /// share sessions and keys with every other such principal. Null (the default): the built-in claims.
    /// </summary>
    public string? OwnerClaimType { get; set; }

    /// <summary>
    /// Computes the owner identity of an authenticated principal instead (a tenant id from several claims, say); null or
    /// empty for a principal it cannot identify (refused as for <see cref="OwnerClaimType"/>). At most one of the two is set.
    /// </summary>
    public Func<System.Security.Claims.ClaimsPrincipal, string?>? OwnerIdentity { get; set; }

    /// <summary>How owners are identified (<see cref="OwnerClaimType"/>, <see cref="OwnerIdentity"/>).</summary>
    internal Sessions.OwnerIdentityOptions OwnerIdentityOptions => _ownerIdentity ??= new(OwnerClaimType, OwnerIdentity);

    private Sessions.OwnerIdentityOptions? _ownerIdentity;

    /// <summary>Most live sessions (never-used ones included); starting more gets 429 with <c>Retry-After</c>. Default 100,000.</summary>
    public int MaxSessions { get; set; } = 100_000;

    /// <summary>
    /// Most live sessions and remembered Idempotency-Keys one authenticated principal may hold; more get 429
    /// (<c>too-many-owner-sessions</c>), so one principal's flood leaves the rest of the table to others. Null (the default):
    /// a tenth of <see cref="MaxSessions"/>, at least 100 (and at most <see cref="MaxSessions"/>). Sessions that other
    /// services of the deployment open for their calls are not counted here.
    /// </summary>
    public int? MaxSessionsPerOwner { get; set; }

    /// <summary>
    /// Most live anonymous sessions and remembered anonymous Idempotency-Keys one client address
    /// (<see cref="Microsoft.AspNetCore.Http.ConnectionInfo.RemoteIpAddress"/>) may hold; more get 429. Behind a reverse
    /// proxy or a service mesh, use ASP.NET Core's forwarded headers middleware so that the address is the client's, not
    /// the proxy's (docs/capacity.md). Null (the default): a tenth of <see cref="MaxSessions"/>, at least 100, but at most half
    /// of <see cref="MaxSessions"/> (at least 1), so that one anonymous address never takes the whole table of a small
    /// deployment and authenticated clients and other addresses still start sessions. A value set here is taken as given.
    /// </summary>
    public int? MaxSessionsPerAddress { get; set; }

    /// <summary>The per-owner share in effect.</summary>
    internal int EffectiveMaxSessionsPerOwner => MaxSessionsPerOwner ?? DefaultShare;

    /// <summary>The per-address share in effect.</summary>
    internal int EffectiveMaxSessionsPerAddress => MaxSessionsPerAddress ?? Math.Max(1, Math.Min(DefaultShare, MaxSessions / 2));

    private int DefaultShare => Math.Max(MaxSessions / 10, Math.Min(MaxSessions, 100));

    /// <summary>
    /// Bytes of buffered replies that sessions may hold in memory between requests (docs/capacity.md). A reply that would
    /// take them above it is kept in the log instead, and a duplicate reads it back from there. Null (the default): an
    /// eighth of the memory the process may use (<see cref="GCMemoryInfo.TotalAvailableMemoryBytes"/>, which is the
    /// container's memory limit when there is one), at least 16 MiB.
    /// </summary>
    public long? SessionMemoryBudgetBytes { get; set; }

    /// <summary>
    /// A reply costing more memory than this (body, headers and about 160 bytes of objects) is never held in memory: it is
    /// logged in full and a duplicate reads it back from the log ([Phoenix/App §4.4]). Default 16 KiB; 0 keeps every reply
    /// in the log; at most half of <see cref="MaxRequestBodyBytes"/> + <see cref="MaxLoggedHeaderBytes"/> (a held reply is
    /// copied into session checkpoints).
    /// </summary>
    public int MaxBufferedReplyBytes { get; set; } = 16 << 10;

    /// <summary>
    /// How long an end client's persistent request waits for its execution. After it the client gets 503 with
    /// <c>Retry-After</c> (problem type <c>reply-pending</c>) while the execution goes on (typically waiting for another
    /// service that is down or recovering: calls are retried until it answers, docs/calls.md); a retry of the same request
    /// waits again as long and gets the reply once it is there, and nothing runs twice. Calls from the deployment's other
    /// services are not bounded here (their own retries are). Null (the default): the domain's
    /// <see cref="DomainOptions.FlushTimeout"/> (5 s) for a member of a service domain, else 30 seconds (less than the
    /// usual proxy and load balancer timeouts, so a client behind one gets this answer rather than a gateway timeout).
    /// <see cref="Timeout.InfiniteTimeSpan"/>: the client waits as long as the execution takes.
    /// </summary>
    public TimeSpan? ReplyTimeout { get; set; }

    /// <summary>The reply timeout in effect (<see cref="ReplyTimeout"/>, or its default).</summary>
    internal TimeSpan EffectiveReplyTimeout => ReplyTimeout ?? (Domain.Members.Count > 0 ? Domain.FlushTimeout : TimeSpan.FromSeconds(30));

    /// <summary>Path of the session resource: <c>POST</c> starts a session, <c>DELETE {path}/{id}</c> ends one. Default <c>/ps/sessions</c>.</summary>
    public string SessionsPath { get; set; } = "/ps/sessions";

    /// <summary>
    /// This service's name in dependency vectors ([MSP §3.1]). Default: the application name. Must be unique within a
    /// service domain and stable across restarts.
    /// </summary>
    public string ServiceName { get; set; } = "";

    /// <summary>
    /// This instance's ordinal among the instances of one service (0 to 255), or null (the default) for a service that runs
    /// as one instance. When set, every session id this instance starts carries the ordinal in its first byte, so a
    /// gateway routes the session's requests to this instance from the id alone (docs/gateway.md). Keep it stable across
    /// restarts and unique among the service's instances: in a StatefulSet, the pod's ordinal (store-2 is 2).
    /// </summary>
    public int? InstanceOrdinal { get; set; }

    /// <summary>A shared variable is checkpointed (its value logged, its backward chain cut) every this many writes. Default 100.</summary>
    public int SharedCheckpointInterval { get; set; } = 100;

    /// <summary>
    /// A session is checkpointed (its state values and buffered reply logged, so recovery starts there) once it logged this
    /// many bytes since its last checkpoint, between two of its requests ([MSP §3.2]). Default 64 KiB.
    /// </summary>
    public int SessionCheckpointBytes { get; set; } = 64 << 10;

    /// <summary>
    /// A service checkpoint (which moves the log anchor and truncates the log, [MSP §3.4]) is taken when this much time
    /// passed since the last one and the log grew meanwhile. Default 1 minute.
    /// </summary>
    public TimeSpan ServiceCheckpointInterval { get; set; } = TimeSpan.FromMinutes(1);

    /// <summary>A service checkpoint is also taken whenever the log grew this many bytes since the last one. Default 64 MiB.</summary>
    public long ServiceCheckpointLogBytes { get; set; } = 64L << 20;

    /// <summary>
    /// A session or shared variable whose latest checkpoint is this many service checkpoints old is checkpointed again
    /// (idle ones too), so the log's start keeps moving and the disk stays bounded. Default 4.
    /// </summary>
    public int IdleCheckpointAfter { get; set; } = 4;

    /// <summary>What recovery does when a session's replay diverges (its code changed, or it is not deterministic). Default <see cref="DivergencePolicy.QuarantineSession"/>.</summary>
    public DivergencePolicy OnDivergence { get; set; } = DivergencePolicy.QuarantineSession;

    /// <summary>Sessions replayed in parallel after a crash. Default: the processor count.</summary>
    public int ReplayParallelism { get; set; } = Environment.ProcessorCount;

    /// <summary>
    /// Process exit code set when recovery fails (a replay diverged or the log could not be read) and the service stops
    /// itself (fail-stop). Default 70; null leaves the exit code alone (tests hosting the service in process).
    /// </summary>
    public int? RecoveryFailureExitCode { get; set; } = 70;

    /// <summary>
    /// Request headers never logged (so never seen by a replayed endpoint). Authorization, Cookie and Proxy-Authorization are
    /// always excluded. By default this set holds the usual API-key and token headers (<see cref="DefaultExcludedRequestHeaders"/>);
    /// add your own, or remove one an endpoint must see in replay. Query strings and bodies are logged as they are
    /// (docs/operations.md, "What the log holds").
    /// </summary>
    public ISet<string> ExcludedRequestHeaders { get; } = new HashSet<string>(DefaultExcludedRequestHeaders, StringComparer.OrdinalIgnoreCase);

    /// <summary>The API-key and token headers <see cref="ExcludedRequestHeaders"/> starts with.</summary>
    public static IReadOnlyList<string> DefaultExcludedRequestHeaders { get; } =
    [
        "X-Api-Key", "Api-Key", "X-Auth-Token", "X-Access-Token", "X-Refresh-Token", "X-Id-Token", "X-Amz-Security-Token",
        "X-Goog-Api-Key", "Ocp-Apim-Subscription-Key", "X-Functions-Key", "X-CSRF-Token", "X-XSRF-Token",
    ];

    /// <summary>The service domain this service belongs to (docs/domains.md); empty: none.</summary>
    public DomainOptions Domain { get; } = new();

    /// <summary>Calls between the deployment's persistent services: peer key, retries, forcing (docs/calls.md).</summary>
    public PersistentCallOptions Calls { get; } = new();

    /// <summary>The <c>Idempotency-Key</c> header for clients without sessions: retention of keys and replies (docs/client.md).</summary>
    public IdempotencyKeyOptions IdempotencyKeys { get; } = new();

    /// <summary>Log shipping to replicas that take over when the primary is lost (docs/replication.md); off unless <see cref="ReplicationOptions.Role"/> is set.</summary>
    public ReplicationOptions Replication { get; } = new();

    /// <summary>Advanced settings of the log (page and segment sizes, metadata interval, zeroed space ahead of the tail, encryption of the records at rest: <see cref="LogOptions.Encryption"/>). <see cref="LogOptions.Directory"/> and <see cref="LogOptions.MaxRecordBytes"/> are set from this class.</summary>
    public LogOptions Log { get; } = new();

    /// <summary>The session memory budget in effect: <see cref="SessionMemoryBudgetBytes"/>, or its default.</summary>
    internal long EffectiveSessionMemoryBudgetBytes => SessionMemoryBudgetBytes ?? DefaultSessionMemoryBudgetBytes();

    /// <summary>An eighth of the memory the process may use (the container's limit when there is one), at least 16 MiB.</summary>
    internal static long DefaultSessionMemoryBudgetBytes() => Math.Max(16L << 20, GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / 8);

    internal LogOptions BuildLogOptions()
    {
        var log = Log.Clone();
        log.Directory = LogDirectory;
        log.MaxRecordBytes = MaxRequestBodyBytes + MaxLoggedHeaderBytes;
        return log;
    }
}

/// <summary>What recovery does when replaying a session does not reproduce what the log says (docs/upgrades.md).</summary>
public enum DivergencePolicy
{
    /// <summary>
    /// Only that session is quarantined: its requests get a <c>session-diverged</c> problem (500), the event is logged at
    /// error level and counted, health turns degraded; every other session and the shared state recover and serve.
    /// </summary>
    QuarantineSession,

    /// <summary>The whole service stops (exit code <see cref="PersistentServicesOptions.RecoveryFailureExitCode"/>).</summary>
    FailStop,
}
