namespace PersistentServices.Checkpoints;

/// <summary>
/// Named points where the crash tests kill the process (SIGKILL of itself, no cleanup), one instance per service (or
/// client) handed to the library through DI: the library's default, <see cref="None"/>, arms nothing, and a hit then
/// costs one comparison. A test program arms one from its own settings (the test service and the client program read
/// <c>PERSISTENTSERVICES_CRASH_POINT</c>, a point's name, and <c>PERSISTENTSERVICES_CRASH_AFTER</c>, the number of hits
/// to let pass first). A service that registers none gets one from its host's configuration
/// (<see cref="PointKey"/> and <see cref="AfterKey"/>: the same two names, which the default host reads from the environment), so a crash
/// test can arm a point in any application built on the library; the library never reads the process environment
/// itself. The engine reaches it as <see cref="Log.DurableLog.CrashPoints"/>.
/// </summary>
internal sealed class CrashPoints
{
    public const string AfterSessionCheckpoint = "session-checkpoint.appended";
    public const string ServiceCheckpointAppended = "service-checkpoint.appended";
    public const string ServiceCheckpointDurable = "service-checkpoint.durable";
    public const string AnchorWritten = "anchor.written";
    public const string LogTruncated = "log.truncated";
    public const string DrainCheckpointed = "drain.checkpointed";
    public const string RecoveryScanned = "recovery.scanned";
    public const string RecoveryReplaying = "recovery.replaying";
    public const string DomainFlushReceived = "domain.flush.received";

    // The request path of a [Persistent] endpoint, the server's steps of [EOS middleware Fig. 2] (docs/client.md, "Crash points").
    public const string RequestAdmitted = "server.request.admitted";
    public const string RequestLogged = "server.request.logged";
    public const string RequestExecuted = "server.request.executed";
    public const string ReplyForced = "server.reply.forced";
    public const string ReplySent = "server.reply.sent";

    private readonly string? _armed;
    private int _pass;

    /// <summary>Arms <paramref name="point"/> (none when null or empty), to fire on the hit after <paramref name="after"/> hits.</summary>
    public CrashPoints(string? point, int after = 0)
    {
        _armed = string.IsNullOrEmpty(point) ? null : point;
        _pass = after;
    }

    /// <summary>The configuration key naming the armed point (an environment variable of the same name in a default host).</summary>
    public const string PointKey = "PERSISTENTSERVICES_CRASH_POINT";

    /// <summary>The configuration key giving the number of hits to let pass before the armed point fires.</summary>
    public const string AfterKey = "PERSISTENTSERVICES_CRASH_AFTER";

    /// <summary>No point armed: what the library uses unless a test program or the configuration arms one.</summary>
    public static CrashPoints None { get; } = new(null);

    /// <summary>The armed point's name, or null.</summary>
    public string? Armed => _armed;

    /// <summary>The hits still to let pass before the armed point fires.</summary>
    public int HitsToPass => Math.Max(0, Volatile.Read(ref _pass));

    /// <summary>Whether <paramref name="point"/> is the armed point (a test wants something done before it fires, e.g. a flush).</summary>
    public bool IsArmed(string point) => _armed is not null && string.Equals(_armed, point, StringComparison.Ordinal);

    public void Hit(string point)
    {
        if (_armed is null || !string.Equals(_armed, point, StringComparison.Ordinal) || Interlocked.Decrement(ref _pass) >= 0)
        {
            return;
        }

        Console.Error.WriteLine($"crash point {point}: SIGKILL");
        Console.Error.Flush();
        System.Diagnostics.Process.GetCurrentProcess().Kill();
        Thread.Sleep(Timeout.Infinite);
    }
}
