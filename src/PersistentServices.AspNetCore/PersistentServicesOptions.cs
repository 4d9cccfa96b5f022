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

    /// <summary>Most live sessions; starting more gets 429. Default 100,000.</summary>
    public int MaxSessions { get; set; } = 100_000;

    /// <summary>Path of the session resource: <c>POST</c> starts a session, <c>DELETE {path}/{id}</c> ends one. Default <c>/ps/sessions</c>.</summary>
    public string SessionsPath { get; set; } = "/ps/sessions";

    /// <summary>
    /// This service's name in dependency vectors (seed 000 §3.1). Default: the application name. Must be unique within a
    /// service domain and stable across restarts.
    /// </summary>
    public string ServiceName { get; set; } = "";

    /// <summary>A shared variable is checkpointed (its value logged, its backward chain cut) every this many writes. Default 100.</summary>
    public int SharedCheckpointInterval { get; set; } = 100;

    /// <summary>Sessions replayed in parallel after a crash. Default: the processor count.</summary>
    public int ReplayParallelism { get; set; } = Environment.ProcessorCount;

    /// <summary>
    /// Process exit code set when recovery fails (a replay diverged or the log could not be read) and the service stops
    /// itself (fail-stop). Default 70; null leaves the exit code alone (tests hosting the service in process).
    /// </summary>
    public int? RecoveryFailureExitCode { get; set; } = 70;

    /// <summary>Request headers never logged (so never seen by a replayed endpoint). Authorization, Cookie and Proxy-Authorization are always excluded.</summary>
    public ISet<string> ExcludedRequestHeaders { get; } = new HashSet<string>(StringComparer.OrdinalIgnoreCase);

    /// <summary>Advanced settings of the log (page and segment sizes, metadata interval). <see cref="LogOptions.Directory"/> and <see cref="LogOptions.MaxRecordBytes"/> are set from this class.</summary>
    public LogOptions Log { get; } = new();

    internal LogOptions BuildLogOptions()
    {
        var log = Log.Clone();
        log.Directory = LogDirectory;
        log.MaxRecordBytes = MaxRequestBodyBytes + MaxLoggedHeaderBytes;
        return log;
    }
}
