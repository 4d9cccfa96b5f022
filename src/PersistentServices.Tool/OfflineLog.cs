using Microsoft.Extensions.Logging;
using PersistentServices.Log;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Tool;

/// <summary>The log directory cannot be opened offline: it is in use, it is not a log, or it does not exist. Nothing was changed.</summary>
internal sealed class OfflineLogRefusedException(string message) : Exception(message);

/// <summary>
/// A stopped service's log, opened as the service's recovery opens it (<see cref="DurableLog.OpenAsync(LogOptions, ILogger?, CancellationToken)"/>:
/// its directory lock, the same verification, a torn tail after the last commit truncated as a start would) and its
/// sessions rebuilt by the same analysis scan (<see cref="AnalysisScan"/>), without replaying anything. For
/// <c>psctl sessions</c>: it refuses while the service (or anything else) holds the directory, and never opens a directory
/// that holds no log, so it never starts a new, empty one.
/// </summary>
internal sealed class OfflineLog : IAsyncDisposable
{
    private OfflineLog(string directory, DurableLog log, SessionTable sessions)
    {
        Directory = directory;
        Log = log;
        Sessions = sessions;
    }

    public string Directory { get; }

    public DurableLog Log { get; }

    /// <summary>The sessions the next start of the service recovers (live: started or checkpointed, not ended).</summary>
    public SessionTable Sessions { get; }

    /// <exception cref="OfflineLogRefusedException">In use, missing, or not a log directory; nothing was changed.</exception>
    /// <exception cref="LogCorruptionException">The service would refuse to start on this log (<c>psctl verify</c> lists why); nothing was changed.</exception>
    /// <remarks><paramref name="keys"/>: the keys of an encrypted log (its <see cref="LogEncryptionOptions.Key"/> seals what psctl appends); null for a log in clear.</remarks>
    public static async Task<OfflineLog> OpenAsync(string directory, int? pageSizeBits, int? segmentSizeBits, LogEncryptionOptions? keys, ILogger logger, CancellationToken cancellationToken)
    {
        directory = Path.GetFullPath(directory);
        if (!System.IO.Directory.Exists(directory))
        {
            throw new OfflineLogRefusedException($"The log directory '{directory}' does not exist.");
        }

        var metadataPath = Path.Combine(directory, CommitMetadataFile.FileName);
        if (SegmentFiles.List(directory).Count == 0 && !File.Exists(metadataPath))
        {
            // DurableLog would start a new, empty log here: never from psctl.
            throw new OfflineLogRefusedException(
                $"'{directory}' is not a PersistentServices log directory: it holds neither {CommitMetadataFile.FileName} nor a log.N segment file. Nothing was created.");
        }

        if (LogVerifier.IsLocked(directory))
        {
            throw InUse(directory);
        }

        var (metadata, _) = CommitMetadataFile.Read(metadataPath);
        var defaults = new LogOptions();
        var options = new LogOptions
        {
            Directory = directory,
            PageSizeBits = pageSizeBits ?? (metadata is { PageSizeBits: > 0 } m1 ? m1.PageSizeBits : defaults.PageSizeBits),
            SegmentSizeBits = segmentSizeBits ?? (metadata is { SegmentSizeBits: > 0 } m2 ? m2.SegmentSizeBits : defaults.SegmentSizeBits),
        };
        options.MemorySizeBits = Math.Max(options.MemorySizeBits, options.PageSizeBits + 1);
        if (keys is not null)
        {
            options.Encryption.Key = keys.Key;
            foreach (var previous in keys.PreviousKeys)
            {
                options.Encryption.PreviousKeys.Add(previous);
            }
        }

        // Keep the modes the service gave its files (LogOptions.FileMode: a backup group may read them); opening with the
        // default would narrow them to the owner until the service's next start.
        if (!OperatingSystem.IsWindows() && File.Exists(metadataPath))
        {
            var mode = File.GetUnixFileMode(metadataPath) & (UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead |
                UnixFileMode.GroupWrite | UnixFileMode.OtherRead | UnixFileMode.OtherWrite);
            options.FileMode = mode | UnixFileMode.UserRead | UnixFileMode.UserWrite;
        }

        options.MaxRecordBytes = Math.Min(options.MaxRecordBytes, (options.PageSize / 2) - LogOptions.EntryOverhead - RecordEnvelope.SealedOverhead);

        DurableLog log;
        try
        {
            log = await DurableLog.OpenAsync(options, logger, cancellationToken).ConfigureAwait(false);
        }
        catch (IOException ex) when (ex is not FileNotFoundException && ex.Message.Contains(DurableLog.LockFileName, StringComparison.Ordinal))
        {
            throw InUse(directory); // the service started meanwhile
        }

        try
        {
            var sessions = new SessionTable();
            var shared = new SharedStateStore(log, "psctl", checkpointInterval: int.MaxValue, logger);

            // What the next start's analysis scan rebuilds, with nothing kept for a replay that does not happen here.
            await AnalysisScan.RunAsync(log, directory, sessions, shared, cancellationToken, keepBudgetBytes: 0, readAtRest: true).ConfigureAwait(false);
            return new OfflineLog(directory, log, sessions);
        }
        catch
        {
            await log.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>Commits what was appended and closes the log (its lock is released).</summary>
    public ValueTask DisposeAsync() => Log.DisposeAsync();

    private static OfflineLogRefusedException InUse(string directory) => new(
        $"The log directory '{directory}' is in use: a process (the service, or another psctl) holds {Path.Combine(directory, DurableLog.LockFileName)}. " +
        "Stop the service first (its drain leaves nothing to replay), or use the admin endpoints of the running service (MapPersistentServicesAdmin, " +
        "docs/operations.md). Nothing was changed.");
}
