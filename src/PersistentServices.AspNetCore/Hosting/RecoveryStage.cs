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

    /// <summary>A replica (docs/replication.md): it holds a copy of the primary's log and serves nothing (503) until promoted, when recovery opens that copy.</summary>
    Replica,
}
