namespace PersistentServices.Calls;

/// <summary>
/// A call to another service ended without a reply: the host is stopping (its drain gave up on the callee, or its shutdown
/// timeout ended the drain: <see cref="HostStopping"/>), or the call failed with an error that is not retried. The calling
/// request is abandoned (its client gets 503 and retries; nothing was acknowledged, and nothing of it is logged after
/// this), and its next run (the restart's replay, or the session's rollback) makes the call again with the same id.
/// </summary>
internal sealed class CallAbandonedException(string message, Exception? inner = null, bool hostStopping = false) : Http.RequestAbandonedException(message, inner)
{
    /// <summary>True when the host's stop ended the call (the restart finishes the request); false for a call that failed.</summary>
    public bool HostStopping { get; } = hostStopping;
}
