namespace PersistentServices;

/// <summary>
/// Calls between the deployment's persistent services (docs/calls.md): how callers are authenticated, how calls are
/// retried, and when the caller forces its log. Part of <see cref="PersistentServicesOptions"/>.
/// </summary>
public sealed class PersistentCallOptions
{
    /// <summary>
    /// The secret the deployment's services share: every call between them and every domain message is signed with it
    /// (HMAC-SHA256 over the call's identity, its callee, a timestamp, its content type and its body), and a callee
    /// honours call ids, roles and implicit sessions only from requests signed for it. At least 32 characters; keep it
    /// out of source control (configuration, a Kubernetes secret). Required to make or receive persistent calls.
    /// </summary>
    public string? PeerKey { get; set; }

    /// <summary>
    /// Further keys a signature is accepted with, besides <see cref="PeerKey"/>; never used to sign. For a rotation
    /// without a stop (docs/calls.md, "Rotating the peer key"): every service accepts the new key, then signs with it,
    /// then the old one is removed. Each at least 32 characters. Empty by default. In configuration:
    /// <c>PersistentServices:Calls:AcceptedPeerKeys:0</c> (an environment variable <c>PersistentServices__Calls__AcceptedPeerKeys__0</c>).
    /// </summary>
    public IList<string> AcceptedPeerKeys { get; } = new List<string>();

    /// <summary>How old a signed call's timestamp may be by the callee's clock (a retry is signed again). Default 5 minutes.</summary>
    public TimeSpan SignatureWindow { get; set; } = TimeSpan.FromMinutes(5);

    /// <summary>
    /// How far ahead of the callee's clock a signed call's timestamp may be: the hosts' clocks may differ by this much. Kept
    /// small, so a captured call cannot be held back and sent later than <see cref="SignatureWindow"/> after it was made.
    /// At most one minute. Default 5 seconds.
    /// </summary>
    public TimeSpan SignatureFutureSkew { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Signatures of the format versions before issue 32 (<c>v1</c>, which bind no callee), for a rolling upgrade from such
    /// a version (docs/upgrades.md, "Signatures of calls"). Default <see cref="PersistentServices.LegacySignatures.Refuse"/>: only
    /// <c>v2</c> is sent and accepted.
    /// </summary>
    public LegacySignatures LegacySignatures { get; set; } = LegacySignatures.Refuse;

    /// <summary>One attempt of a call gives up (and is retried with the same id) after this long. Default 30 seconds.</summary>
    public TimeSpan AttemptTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>First delay between attempts; it doubles, with jitter, up to <see cref="MaxRetryDelay"/>. Default 100 ms.</summary>
    public TimeSpan RetryDelay { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>
    /// Longest delay between attempts. A call is retried until a reply arrives or the host stops, whatever the client's
    /// <see cref="HttpClient.Timeout"/> (<c>AddPersistentCalls()</c> sets it to infinite, and the call ignores it). Default 5 seconds.
    /// </summary>
    public TimeSpan MaxRetryDelay { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// While the host drains (SIGTERM), how long a call of a running request is still retried when its callee is out of
    /// reach or answers 503 (it may be stopping too, or restarting). After it the request is abandoned (its client gets
    /// 503; the request is finished after the restart, under the same call id), so services stopped together drain in
    /// seconds rather than waiting for each other until the shutdown timeout. An attempt the callee is answering goes on
    /// until the shutdown timeout. Default 5 seconds.
    /// </summary>
    public TimeSpan DrainRetryTime { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>When the caller forces its log before calling a persistent service. Default <see cref="CallLogging.MultiCall"/>.</summary>
    public CallLogging Logging { get; set; } = CallLogging.MultiCall;

    /// <summary>
    /// Whether this service tells callers its component role (<c>PS-Role</c>) and uses what callees tell: functional and
    /// read-only callees then cost no force and no call id. False: every callee is treated as persistent (the baseline
    /// the bookstore benchmark compares with). Default true.
    /// </summary>
    public bool UseRoles { get; set; } = true;

    /// <summary>
    /// The replication groups (docs/replication.md) among this service's callees: each a list of the base addresses (scheme,
    /// host and port, http or https, no path) of one service's nodes, a primary and its replicas, at least two; a node in
    /// one group only. An attempt of a call (persistent or not) through an <c>AddPersistentCalls()</c> client to an address
    /// of a group goes to the group's node that last served (at first, the call's own address); a node that refuses or
    /// drops the connection, or answers no reply within <see cref="AttemptTimeout"/>, or answers <c>503</c> problem
    /// <c>replica</c>, is passed over for the next node of the group, once around; then the call is retried as any other
    /// (<see cref="RetryDelay"/>), each retry going around again. The call keeps its id, headers and signature on every
    /// node, so its callee runs it once; it never goes to an address outside its group. Validated at startup. From
    /// configuration: <c>PersistentServices:Calls:ReplicationGroups:0:0=http://store-0:8080</c>,
    /// <c>PersistentServices:Calls:ReplicationGroups:0:1=http://store-1:8080</c>, ... (environment variables
    /// <c>PersistentServices__Calls__ReplicationGroups__0__0</c>, ...). Default: none (docs/calls.md, "Calling a replicated service").
    /// </summary>
    public IList<IList<Uri>> ReplicationGroups { get; } = new List<IList<Uri>>();
}

/// <summary>
/// What a service does with signatures of format <c>v1</c> (<see cref="PersistentCallOptions.LegacySignatures"/>), which
/// versions before issue 32 send and accept only: a <c>v1</c> signature does not bind the callee, so a captured call can be
/// sent to another service of the deployment that maps the same path. An upgrade without a stop takes three rolling
/// restarts (docs/upgrades.md): <see cref="SignAndAccept"/>, then <see cref="Accept"/>, then <see cref="Refuse"/>.
/// </summary>
public enum LegacySignatures
{
    /// <summary>Sign <c>v2</c>, accept only <c>v2</c> (the default; every service of the deployment runs this version or later).</summary>
    Refuse,

    /// <summary>Sign <c>v2</c>, accept <c>v1</c> too: the second step, while services of the first step still sign <c>v1</c>.</summary>
    Accept,

    /// <summary>Sign <c>v1</c> (older services accept nothing else), accept both: the first step, while older services still run.</summary>
    SignAndAccept,
}

/// <summary>When a persistent request forces the log around its calls (Phoenix/App §2.3, §3.1, §3.5).</summary>
public enum CallLogging
{
    /// <summary>
    /// Phoenix/App Algorithm 1 (the baseline): every message is logged and forced: the incoming request, each outgoing
    /// call, each call's reply, the reply. For comparison only.
    /// </summary>
    ForceEveryMessage,

    /// <summary>Phoenix/App Algorithm 2: force before each call to a persistent service (a send commits the caller's state), and before the reply.</summary>
    ForceBeforeEachCall,

    /// <summary>
    /// Phoenix/App §3.5 (the multi-call optimization, which the paper left unbuilt): force before the request's first
    /// call to a persistent service, and again only before calling a service already called in this request, and before
    /// the reply. The argument is in docs/calls.md.
    /// </summary>
    MultiCall,
}
