namespace PersistentServices.Sessions;

/// <summary>How the current request runs.</summary>
internal enum ExecutionMode
{
    /// <summary>A logged request executing for the first time.</summary>
    Live,

    /// <summary>A logged request re-executed from the log during recovery ([MSP §4.1] "Logged Request Replay").</summary>
    Replay,

    /// <summary>A read-only request ([Phoenix/App §3.3]): not logged, changes no session state.</summary>
    ReadOnly,
}
