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

/// <summary>
/// A member of this service's domain refused a persistent call without running it (its protocol's refusal: the DV or
/// signature not accepted, the call's number out of its session's order): the calling request is abandoned and runs again
/// after a pause under the same call number (<see cref="Domain.OrphanRecovery"/>, which quarantines the session when the
/// refusals do not stop), never logged as the call's reply.
/// </summary>
internal sealed class CallRefusedException(string message, bool numbering) : Http.RequestAbandonedException(message)
{
    /// <summary>
    /// True when the member refused the call's number (a gap, a stale or reused number): the two sessions disagree on their
    /// order, which a rollback settles or nothing does, so such turns count toward the quarantine. A refused DV or signature
    /// (a member's configuration, or state it is still learning) is waited out like a member out of reach.
    /// </summary>
    public bool Numbering { get; } = numbering;
}
