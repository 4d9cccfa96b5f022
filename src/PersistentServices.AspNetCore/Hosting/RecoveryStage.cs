namespace PersistentServices.Hosting;

/// <summary>Where recovery is ([MSP Fig. 12]); <see cref="ServiceAvailability.Stage"/>.</summary>
internal enum RecoveryStage
{
    NotStarted,
    Scanning,
    Replaying,
    Ready,
    Failed,

    /// <summary>The host is stopping: running requests finish, new ones get 503, then everything is checkpointed.</summary>
    Draining,
}
