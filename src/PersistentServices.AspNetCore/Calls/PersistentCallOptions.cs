namespace PersistentServices;

/// <summary>
/// Calls between the deployment's persistent services (docs/calls.md): how callers are authenticated, how calls are
/// retried, and when the caller forces its log. Part of <see cref="PersistentServicesOptions"/>.
/// </summary>
public sealed class PersistentCallOptions
{
    /// <summary>
    /// The secret the deployment's services share: every call between them is signed with it (HMAC-SHA256 over the call's
    /// identity, a timestamp and its body), and a callee honours call ids, roles and implicit sessions only from
    /// requests it signed. At least 32 characters; keep it out of source control (configuration, a Kubernetes secret).
    /// Required to make or receive persistent calls.
    /// </summary>
    public string? PeerKey { get; set; }

    /// <summary>How far a signed call's timestamp may be from the callee's clock. Default 5 minutes.</summary>
    public TimeSpan SignatureWindow { get; set; } = TimeSpan.FromMinutes(5);

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
