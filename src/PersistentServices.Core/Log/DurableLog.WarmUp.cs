using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>
/// Warming a standby's log code (docs/replication.md, "Hot followers"): a replica writes its copy with its own code and
/// never opens a <see cref="DurableLog"/> until it is promoted, so without this the promotion compiled FASTER's open,
/// recovery and commit code on the spot (FASTER ships no ReadyToRun images): 40–50 ms of the failover on the 2-core VM.
/// </summary>
internal sealed partial class DurableLog
{
    /// <summary>The scratch log's directory under the replica's log directory (deleted before and after the warm-up).</summary>
    internal const string WarmUpDirectoryName = "warm-up";

    /// <summary>
    /// Runs the paths a promotion takes once, on a scratch log in <see cref="WarmUpDirectoryName"/> under
    /// <paramref name="options"/>' directory: open a new log, append and force a record, close it, open it again (FASTER's
    /// recovery of a committed log), force again, close; then the scratch directory is deleted. The scratch log has the
    /// real one's settings (record envelope, encryption, file modes) on small pages, and shares nothing with it: its own
    /// files, lock and metadata. Compiled code is the process's, so the real open that follows runs warm.
    /// </summary>
    internal static async Task WarmUpAsync(LogOptions options, CancellationToken cancellationToken)
    {
        var scratch = options.Clone();
        scratch.Directory = Path.Combine(Path.GetFullPath(options.Directory), WarmUpDirectoryName);
        scratch.PageSizeBits = 16;
        scratch.MemorySizeBits = 17;
        scratch.SegmentSizeBits = 16;
        scratch.MaxRecordBytes = 1024;
        scratch.ZeroFillBytes = 4096;
        scratch.DeviceFactory = null;
        DeleteScratch(scratch.Directory);
        try
        {
            for (var open = 0; open < 2; open++)
            {
                var log = await OpenAsync(scratch, logger: null, cancellationToken).ConfigureAwait(false);
                await using (log.ConfigureAwait(false))
                {
                    var lsn = log.Append(RecordKind.EpochStarted, new EpochStarted { Epoch = open + 1, Service = WarmUpDirectoryName });
                    await log.WaitUntilDurableAsync(lsn, cancellationToken).ConfigureAwait(false);
                }
            }
        }
        finally
        {
            DeleteScratch(scratch.Directory);
        }
    }

    private static void DeleteScratch(string directory)
    {
        if (System.IO.Directory.Exists(directory))
        {
            System.IO.Directory.Delete(directory, recursive: true);
        }
    }
}
