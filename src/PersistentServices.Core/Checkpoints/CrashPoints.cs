namespace PersistentServices.Checkpoints;

/// <summary>
/// Named points where the crash tests kill the process (SIGKILL of itself, no cleanup): set the environment variable
/// <c>PERSISTENTSERVICES_CRASH_POINT</c> to a name, and optionally <c>PERSISTENTSERVICES_CRASH_AFTER</c> to the number
/// of hits to let pass first. For tests only; unset, a hit costs one comparison.
/// </summary>
internal static class CrashPoints
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

    private static readonly string? Armed = Environment.GetEnvironmentVariable("PERSISTENTSERVICES_CRASH_POINT");
    private static int _pass = int.TryParse(Environment.GetEnvironmentVariable("PERSISTENTSERVICES_CRASH_AFTER"), out var n) ? n : 0;

    /// <summary>Whether <paramref name="point"/> is the armed point (a test wants something done before it fires, e.g. a flush).</summary>
    public static bool IsArmed(string point) => Armed is not null && string.Equals(Armed, point, StringComparison.Ordinal);

    public static void Hit(string point)
    {
        if (Armed is null || !string.Equals(Armed, point, StringComparison.Ordinal) || Interlocked.Decrement(ref _pass) >= 0)
        {
            return;
        }

        Console.Error.WriteLine($"crash point {point}: SIGKILL");
        Console.Error.Flush();
        System.Diagnostics.Process.GetCurrentProcess().Kill();
        Thread.Sleep(Timeout.Infinite);
    }
}
