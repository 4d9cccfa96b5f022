namespace PersistentServices.Sessions;

/// <summary>Quarantine: a session whose replay diverged is refused until it ends or an operator releases it.</summary>
internal sealed partial class Session
{
    /// <summary>The divergence that quarantined this session (its requests get <c>session-diverged</c>); null otherwise.</summary>
    public ReplayDivergenceException? Diverged { get; private set; }

    /// <summary>
    /// Why the session was quarantined, read from its quarantine marker (a session checkpoint with <c>quarantined</c> set):
    /// recovery quarantines it again without replaying anything. Null for a session that is not marked.
    /// </summary>
    public string? QuarantineReason { get; private set; }

    /// <summary>
    /// Replay diverged, or orphan recovery gave up on the session: it is quarantined; the others go on. A session that
    /// was serving (orphan recovery's cap quarantines a ready session) stops admitting requests too: its readiness is
    /// replaced by the failure, which is what request admission checks.
    /// </summary>
    public void Quarantine(ReplayDivergenceException divergence)
    {
        lock (_gate)
        {
            Diverged = divergence;
            if (_ready.Task.IsCompletedSuccessfully)
            {
                _ready = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            }

            _ready.TrySetException(divergence);
        }
    }

    /// <summary>
    /// An operator released the quarantined session (or a key's retention ended): it serves again from the checkpoint
    /// that was just logged for it (<see cref="ContinueFromCheckpoint"/> already restored its numbering and stand-in reply).
    /// </summary>
    public void ReleaseQuarantine()
    {
        lock (_gate)
        {
            Diverged = null;
            QuarantineReason = null;
            if (!_ready.Task.IsCompletedSuccessfully)
            {
                _ready = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                _ready.SetResult();
            }
        }
    }
}
