using Google.Protobuf;
using Microsoft.Extensions.Logging;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// Damage from outside (a partial copy or restore, a lying disk, an operator's mistake) that removes committed data must
/// make the open refuse, never start with less (docs/log-format.md, "Recovery"); and the refusal changes nothing on disk.
/// </summary>
public sealed class OutsideDamageRefusalTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static Payload MakePayload(uint tag, int size)
    {
        var bytes = new byte[size];
        new Random((int)tag + 1).NextBytes(bytes);
        return new Payload { Tag = tag, Data = ByteString.CopyFrom(bytes) };
    }

    /// <summary>Appends <paramref name="commits"/> commits of <paramref name="perCommit"/> records and returns the open log.</summary>
    private static async Task<DurableLog> OpenAndWriteAsync(string directory, int commits, int perCommit = 2, int size = 300, long zeroFill = DirectFileDevice.DefaultZeroFillBytes)
    {
        var log = await DurableLog.OpenAsync(LogTestOptions.Small(directory, (basePath, io) => DurableLog.CreateDefaultDevice(basePath, io, zeroFill)), cancellationToken: Ct);
        uint tag = 0;
        for (var c = 0; c < commits; c++)
        {
            long last = 0;
            for (var i = 0; i < perCommit; i++)
            {
                last = log.Append(RecordKind.Payload, MakePayload(tag++, size));
            }

            await log.WaitUntilDurableAsync(last, Ct);
        }

        return log;
    }

    /// <summary>Waits (bounded) until the commit metadata covers everything durable, as it does a moment after each commit.</summary>
    private static async Task WaitForMetadataAsync(DurableLog log)
    {
        for (var i = 0; i < 500 && log.MetadataFloor < log.DurableUntil; i++)
        {
            await Task.Delay(2, Ct);
        }

        Assert.Equal(log.DurableUntil, log.MetadataFloor);
    }

    /// <summary>A copy of the directory as a crash (or a file-level backup) would leave it, taken while the log is open and idle.</summary>
    private static void Snapshot(string from, string to)
    {
        Directory.CreateDirectory(to);
        foreach (var file in Directory.GetFiles(from).Where(f => Path.GetFileName(f) != "directory.lock"))
        {
            File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
        }
    }

    private static Dictionary<string, (long Length, string Hash)> Describe(string directory) =>
        Directory.GetFiles(directory).ToDictionary(
            f => Path.GetFileName(f),
            f => (new FileInfo(f).Length, Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(File.ReadAllBytes(f)))));

    private static async Task<LogCorruptionException> AssertRefusedAsync(string directory)
    {
        var before = Describe(directory);
        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(LogTestOptions.Small(directory), cancellationToken: Ct));
        var after = Describe(directory);
        after.Remove("directory.lock");
        before.Remove("directory.lock");
        Assert.Equal(before, after);
        Assert.Contains("psctl verify", error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain("never acknowledged", error.Message, StringComparison.Ordinal);
        return error;
    }

    [Fact]
    public async Task Commit_MetadataFloor_FollowsEveryCommitOnDisk()
    {
        using var dir = new TempDirectory();
        await using var log = await OpenAndWriteAsync(dir.Path, commits: 1);

        await WaitForMetadataAsync(log);
        var (onDisk, _) = CommitMetadataFile.Read(dir.Combine(CommitMetadataFile.FileName));
        Assert.Equal(log.DurableUntil, onDisk!.Value.CommittedUntil);
        Assert.Equal(14, onDisk.Value.PageSizeBits);
        Assert.Equal(16, onDisk.Value.SegmentSizeBits);

        for (var i = 0; i < 20; i++)
        {
            await log.WaitUntilDurableAsync(log.Append(RecordKind.Payload, MakePayload((uint)(100 + i), 50)), Ct);
        }

        await WaitForMetadataAsync(log);
        (onDisk, _) = CommitMetadataFile.Read(dir.Combine(CommitMetadataFile.FileName));
        Assert.Equal(log.DurableUntil, onDisk!.Value.CommittedUntil);
        Assert.True(log.MetadataLag.Writes >= 1);
    }

    [Fact]
    public async Task Open_NewLog_CreatesTheFirstSegmentBeforeTheMetadata()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);

        Assert.True(File.Exists(dir.Combine("log.0")));
        Assert.True(File.Exists(dir.Combine(CommitMetadataFile.FileName)));
    }

    [Fact]
    public async Task Open_YoungLogWhoseOnlySegmentWasDeleted_Refuses()
    {
        using var dir = new TempDirectory();
        using var copy = new TempDirectory();
        await using (var log = await OpenAndWriteAsync(dir.Path, commits: 3))
        {
            await WaitForMetadataAsync(log);
            Snapshot(dir.Path, copy.Path);
        }

        File.Delete(copy.Combine("log.0"));

        var error = await AssertRefusedAsync(copy.Path);

        Assert.Contains("no segment file", error.Message, StringComparison.Ordinal);
        Assert.Contains("may have been acknowledged", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Open_MetadataWithoutAnySegmentEvenForAnEmptyLog_Refuses()
    {
        using var dir = new TempDirectory();
        await (await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct)).DisposeAsync();
        File.Delete(dir.Combine("log.0"));

        await AssertRefusedAsync(dir.Path);
    }

    [Theory]
    [InlineData(1)]
    [InlineData(100)]
    [InlineData(511)]
    [InlineData(1000)]
    public async Task Open_LastSegmentCutToALengthThatIsNotWholeSectors_RefusesNamingFileAndLength(int cutBytes)
    {
        using var dir = new TempDirectory();
        using var copy = new TempDirectory();
        await using (var log = await OpenAndWriteAsync(dir.Path, commits: 12))
        {
            await WaitForMetadataAsync(log);
            Snapshot(dir.Path, copy.Path);
        }

        var segment = SegmentFiles.List(copy.Path).Last();
        var path = SegmentFiles.PathOf(SegmentFiles.BasePath(copy.Path), segment.Key);
        var length = segment.Value - cutBytes;
        using (var stream = new FileStream(path, FileMode.Open, FileAccess.Write))
        {
            stream.SetLength(length);
        }

        var error = await AssertRefusedAsync(copy.Path);

        // Cut below the commit metadata's floor, the loss is named first; the length is a problem of its own either way.
        Assert.Equal(path, error.File);
        var (metadata, _) = CommitMetadataFile.Read(copy.Combine(CommitMetadataFile.FileName));
        var scan = LogRecoveryScanner.Scan(copy.Path, LogTestOptions.Small(copy.Path), metadata);
        Assert.Contains(scan.Problems, p => p.File == path && p.Message.Contains($"is {length} bytes, not a whole number of 512-byte sectors", StringComparison.Ordinal));
    }

    [Fact]
    public async Task Open_CutAtA4KiBBoundaryBelowTheMetadataFloor_RefusesSayingMayHaveBeenAcknowledged()
    {
        using var dir = new TempDirectory();
        using var copy = new TempDirectory();
        long durable;
        await using (var log = await OpenAndWriteAsync(dir.Path, commits: 40, perCommit: 3))
        {
            await WaitForMetadataAsync(log);
            durable = log.DurableUntil;
            Snapshot(dir.Path, copy.Path);
        }

        // Cut the last 4 KiB boundary below the committed end: every byte kept is intact, only committed data is gone.
        var cut = (durable - 1) & ~4095L;
        var segment = (int)(cut >> 16);
        foreach (var later in SegmentFiles.List(copy.Path).Keys.Where(s => s > segment))
        {
            File.Delete(SegmentFiles.PathOf(SegmentFiles.BasePath(copy.Path), later));
        }

        using (var stream = new FileStream(SegmentFiles.PathOf(SegmentFiles.BasePath(copy.Path), segment), FileMode.Open, FileAccess.Write))
        {
            stream.SetLength(cut & 0xFFFF);
        }

        var error = await AssertRefusedAsync(copy.Path);

        Assert.Contains($"committed until {durable}", error.Message, StringComparison.Ordinal);
        Assert.Contains("may have been acknowledged", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Open_LastSegmentDeletedBelowTheMetadataFloor_RefusesNamingTheSegment()
    {
        using var dir = new TempDirectory();
        using var copy = new TempDirectory();
        await using (var log = await OpenAndWriteAsync(dir.Path, commits: 80, perCommit: 3, size: 900))
        {
            await WaitForMetadataAsync(log);
            Snapshot(dir.Path, copy.Path);
        }

        var last = SegmentFiles.List(copy.Path).Keys.Max();
        Assert.True(last > 0, "the test needs more than one segment");
        var path = SegmentFiles.PathOf(SegmentFiles.BasePath(copy.Path), last);
        File.Delete(path);

        var error = await AssertRefusedAsync(copy.Path);

        Assert.Contains($"'{path}' is missing", error.Message, StringComparison.Ordinal);
    }

    /// <summary>Writes a log of at least three segments and closes it; returns the path of segment 1 (full, neither first nor last).</summary>
    private static async Task<string> WriteThreeSegmentsAsync(string directory)
    {
        await (await OpenAndWriteAsync(directory, commits: 80, perCommit: 3, size: 900)).DisposeAsync();
        Assert.True(SegmentFiles.List(directory).Count >= 3, "the test needs three segments");
        return SegmentFiles.PathOf(SegmentFiles.BasePath(directory), 1);
    }

    [Fact]
    public async Task Open_SegmentMissingBetweenOthers_Refuses()
    {
        using var dir = new TempDirectory();
        var path = await WriteThreeSegmentsAsync(dir.Path);
        File.Delete(path);

        var error = await AssertRefusedAsync(dir.Path);

        Assert.Equal(path, error.File);
    }

    [Fact]
    public async Task Open_FullSegmentLengthenedFromOutside_RefusesNamingFileAndLength()
    {
        using var dir = new TempDirectory();
        var path = await WriteThreeSegmentsAsync(dir.Path);
        var segmentSize = 1L << LogTestOptions.Small(dir.Path).SegmentSizeBits;
        Assert.Equal(segmentSize, new FileInfo(path).Length);
        using (var stream = new FileStream(path, FileMode.Append, FileAccess.Write))
        {
            stream.Write(new byte[4096]); // zeros: even bytes that look like the log's own zeroed space are not this log's
        }

        var error = await AssertRefusedAsync(dir.Path);

        Assert.Equal(path, error.File);
        Assert.Contains($"is {segmentSize + 4096} bytes, longer than the segment size {segmentSize}", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Open_MetadataBeginSegmentMissingAndNoTruncationRecordCoversIt_Refuses()
    {
        using var dir = new TempDirectory();
        await (await OpenAndWriteAsync(dir.Path, commits: 80, perCommit: 3, size: 900)).DisposeAsync();
        File.Delete(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), 0));

        var error = await AssertRefusedAsync(dir.Path);

        Assert.Contains("begin address cannot be verified", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Open_WithOtherGeometryThanRecorded_RefusesNamingBoth()
    {
        using var dir = new TempDirectory();
        await (await OpenAndWriteAsync(dir.Path, commits: 3)).DisposeAsync();
        var options = LogTestOptions.Small(dir.Path);
        options.SegmentSizeBits = 20;

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(options, cancellationToken: Ct));

        Assert.Contains("SegmentSizeBits 16", error.Message, StringComparison.Ordinal);
        Assert.Contains("20", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData(0)] // the file ends with the data
    [InlineData(8192)] // zeroed space after the data (what the log keeps), then the garbage
    public async Task Open_GarbageAppendedAfterTheData_IsCutAsATornTail_AndTheWarningDoesNotClaimNeverAcknowledged(int zeroFill)
    {
        using var dir = new TempDirectory();
        long durable;
        await using (var log = await OpenAndWriteAsync(dir.Path, commits: 5, zeroFill: zeroFill))
        {
            durable = log.DurableUntil;
            for (var i = 0; i < 1000 && zeroFill > 0 && SegmentFiles.List(dir.Path).Last().Value < SegmentFiles.CeilSector(durable) + zeroFill; i++)
            {
                await Task.Delay(2, Ct); // the fill runs on the thread pool
            }
        }

        Assert.True(SegmentFiles.List(dir.Path).Last().Value >= SegmentFiles.CeilSector(durable) + zeroFill);

        var segment = SegmentFiles.List(dir.Path).Last();
        var garbage = new byte[777];
        new Random(5).NextBytes(garbage);
        using (var stream = new FileStream(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), segment.Key), FileMode.Append, FileAccess.Write))
        {
            stream.Write(garbage);
        }

        var logger = new CapturingLogger();
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger, Ct))
        {
            Assert.Equal(durable, log.DurableUntil);
            var warning = Assert.Single(logger.At(LogLevel.Warning), e => e.Id.Id == 1001);
            Assert.Contains("added after the log's data from outside", warning.Message, StringComparison.Ordinal);
            Assert.DoesNotContain("never committed", warning.Message, StringComparison.Ordinal);
        }

        // The cut keeps whole sectors, so the next open finds nothing wrong.
        Assert.Equal(0, SegmentFiles.List(dir.Path).Last().Value % LogRecoveryScanner.SectorSize);
        var again = new CapturingLogger();
        await (await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), again, Ct)).DisposeAsync();
        Assert.Empty(again.At(LogLevel.Warning));
    }

    [Fact]
    public async Task Scan_SeveralProblems_ListsEveryOne()
    {
        using var dir = new TempDirectory();
        await (await OpenAndWriteAsync(dir.Path, commits: 80, perCommit: 3, size: 900)).DisposeAsync();
        var segments = SegmentFiles.List(dir.Path);
        File.Delete(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), 1));
        var last = segments.Keys.Max();
        using (var stream = new FileStream(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), last), FileMode.Open, FileAccess.Write))
        {
            stream.SetLength(segments[last] - 3);
        }

        var (metadata, _) = CommitMetadataFile.Read(dir.Combine(CommitMetadataFile.FileName));
        var scan = LogRecoveryScanner.Scan(dir.Path, LogTestOptions.Small(dir.Path), metadata);

        Assert.True(scan.Problems.Count >= 2, string.Join(Environment.NewLine, scan.Problems.Select(p => p.Message)));
        Assert.Contains(scan.Problems, p => p.Message.Contains("log.1' is missing", StringComparison.Ordinal));
        Assert.Contains(scan.Problems, p => p.Message.Contains("not a whole number of 512-byte sectors", StringComparison.Ordinal));
    }
}
