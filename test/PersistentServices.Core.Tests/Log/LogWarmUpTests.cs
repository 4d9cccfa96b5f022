using System.Security.Cryptography;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// A replica warms the log's code on a scratch log under its log directory (DurableLog.WarmUpAsync, run by the hot
/// follower), so its promotion opens the copy with the code compiled. The scratch log must leave the real one exactly as
/// it was, and leave nothing behind, also after a warm-up that a crash cut short.
/// </summary>
public sealed class LogWarmUpTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task AWarmUp_LeavesTheLogDirectoryByteForByteAsItWas_AndNoScratchLog()
    {
        using var dir = new TempDirectory();
        var options = LogTestOptions.Small(dir.Path);
        long last;
        await using (var log = await DurableLog.OpenAsync(options, cancellationToken: Ct))
        {
            for (var i = 0; i < 50; i++)
            {
                log.Append(RecordKind.EpochStarted, new EpochStarted { Epoch = i + 1, Service = "real" });
            }

            last = log.Append(RecordKind.EpochStarted, new EpochStarted { Epoch = 51, Service = "real" });
            await log.WaitUntilDurableAsync(last, Ct);
        }

        var before = Contents(dir.Path);

        await DurableLog.WarmUpAsync(options, Ct);

        Assert.False(Directory.Exists(Path.Combine(dir.Path, DurableLog.WarmUpDirectoryName)), "the scratch log was left behind");
        Assert.Equal(before, Contents(dir.Path));
        await using var reopened = await DurableLog.OpenAsync(options, cancellationToken: Ct);
        Assert.True(reopened.DurableUntil > last);
        Assert.Equal("real", (await reopened.ReadAsync(last, Ct)).Parse(EpochStarted.Parser).Service);
    }

    [Fact]
    public async Task AWarmUpThatACrashCutShort_IsClearedByTheNext()
    {
        using var dir = new TempDirectory();
        var options = LogTestOptions.Small(dir.Path);
        var scratch = Path.Combine(dir.Path, DurableLog.WarmUpDirectoryName);
        Directory.CreateDirectory(scratch);
        await File.WriteAllBytesAsync(Path.Combine(scratch, "log.0"), RandomNumberGenerator.GetBytes(10_000), Ct);
        await File.WriteAllTextAsync(Path.Combine(scratch, CommitMetadataFile.FileName), "half a file", Ct);

        await DurableLog.WarmUpAsync(options, Ct);

        Assert.False(Directory.Exists(scratch));
    }

    /// <summary>Every file under <paramref name="directory"/> with a hash of its bytes, in name order.</summary>
    private static string Contents(string directory)
        => string.Join('\n', Directory.EnumerateFiles(directory, "*", SearchOption.AllDirectories).Order(StringComparer.Ordinal)
            .Select(f => $"{Path.GetRelativePath(directory, f)} {Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(f)))}"));
}
