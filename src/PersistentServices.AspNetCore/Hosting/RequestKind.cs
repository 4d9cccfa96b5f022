namespace PersistentServices.Hosting;

/// <summary>
/// What asks <see cref="ServiceAvailability.CanServe"/> whether it may go on. Three tests stand behind the kinds: the log
/// is open and has not faulted and recovery replays or is done (new work: not while draining); the same, and also while
/// draining (work the drain waits for, or only reads); calls' retries (not after a drain's retry time).
/// </summary>
internal enum RequestKind
{
    /// <summary>A persistent request already counted as executing (<see cref="ServiceAvailability.TryBeginExecution"/>), at its admission: also while draining, which waits for it.</summary>
    PersistentRequest,

    /// <summary>An admitted persistent request about to execute after waiting for its session: as <see cref="PersistentRequest"/>.</summary>
    AdmittedRequest,

    /// <summary>Listing or showing sessions (the admin endpoints): a read of what recovery found, also while draining.</summary>
    SessionInspection,

    /// <summary>A <c>[PersistentReadOnly]</c> request: not while draining.</summary>
    ReadOnlyRequest,

    /// <summary>Starting or ending a session through the sessions resource, or an Idempotency-Key's session: not while draining.</summary>
    SessionResource,

    /// <summary>An operator's repair of a quarantined session (the admin endpoints): not while draining.</summary>
    Repair,

    /// <summary>A message from a member of the service domain (a flush, recovered state numbers): not while draining.</summary>
    DomainMessage,

    /// <summary>The service's own work between requests (service checkpoints, idle and key expiry, orphan rollback, the domain's broadcast): not while draining.</summary>
    BackgroundWork,

    /// <summary>
    /// A call of a running request that found its callee out of reach (or answering 503), asked again: always, except in a
    /// drain that began more than <see cref="PersistentCallOptions.DrainRetryTime"/> ago.
    /// </summary>
    CallRetry,
}
