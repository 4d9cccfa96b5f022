using Google.Protobuf;
using Microsoft.Extensions.Logging;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>Storage faults (RELIABILITY.md rows 2–7): torn tails, bit flips, lost metadata, write errors, disk full.</summary>
public sealed class LogFaultTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static Payload MakePayload(uint tag, int size)
    {
        var bytes = new byte[size];
        new Random((int)tag + 1).NextBytes(bytes);
        return new Payload { Tag = tag, Data = ByteString.CopyFrom(bytes) };
    }

    /// <summary>Writes <paramref name="commits"/> commits of <paramref name="perCommit"/> records; returns (lsn, payload) in order.</summary>
    private static async Task<List<(long Lsn, Payload Payload)>> WriteCommittedAsync(string directory, int commits, int perCommit, int size = 300)
    {
        var written = new List<(long, Payload)>();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(directory), cancellationToken: Ct);
        uint tag = 0;
        for (var c = 0; c < commits; c++)
        {
            long last = 0;
            for (var i = 0; i < perCommit; i++)
            {
                var payload = MakePayload(tag++, size);
                last = log.Append(RecordKind.Payload, payload);
                written.Add((last, payload));
            }

            await log.WaitUntilDurableAsync(last, Ct);
        }

        return written;
    }

    private static async Task<List<LogRecord>> ReadAllAsync(DurableLog log)
    {
        var records = new List<LogRecord>();
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            records.Add(record);
        }

        return records;
    }

    private static async Task AssertHoldsAsync(DurableLog log, IEnumerable<(long Lsn, Payload Payload)> expected)
    {
        var byLsn = (await ReadAllAsync(log)).ToDictionary(r => r.Lsn);
        foreach (var (lsn, payload) in expected)
        {
            Assert.True(byLsn.TryGetValue(lsn, out var record), $"record {lsn} is missing");
            Assert.Equal(payload, record.Parse(Payload.Parser));
        }
    }

    private static string SegmentPath(string directory, long address, int segmentSizeBits = 16)
        => SegmentFiles.PathOf(SegmentFiles.BasePath(directory), (int)(address >> segmentSizeBits));

    private static long FileOffset(long address, int segmentSizeBits = 16) => address & ((1L << segmentSizeBits) - 1);

    private static void FlipBit(string file, long offset, int bit)
    {
        using var stream = new FileStream(file, FileMode.Open, FileAccess.ReadWrite);
        stream.Position = offset;
        var b = stream.ReadByte();
        stream.Position = offset;
        stream.WriteByte((byte)(b ^ (1 << bit)));
    }

    private static void CopyDirectory(string from, string to)
    {
        Directory.CreateDirectory(to);
        foreach (var file in Directory.GetFiles(from))
        {
            File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
        }
    }

    [Fact]
    public async Task TornTail_GarbageAfterTheLastCommit_IsTruncatedAndTheWarningNamesTheRange()
    {
        using var dir = new TempDirectory();
        var written = await WriteCommittedAsync(dir.Path, commits: 5, perCommit: 4);
        long committed;
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            committed = log.DurableUntil;
        }

        var garbage = new byte[3000];
        new Random(1).NextBytes(garbage);
        using (var stream = new FileStream(SegmentPath(dir.Path, committed), FileMode.Open, FileAccess.Write))
        {
            stream.Position = FileOffset(committed);
            stream.Write(garbage);
        }

        var logger = new CapturingLogger();
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger, Ct))
        {
            Assert.Equal(committed, log.DurableUntil);
            var warning = Assert.Single(logger.At(LogLevel.Warning), e => e.Id.Id == 1001);
            Assert.Contains($"[{committed}, {committed + garbage.Length})", warning.Message, StringComparison.Ordinal);
            await AssertHoldsAsync(log, written);
            var more = log.Append(RecordKind.Payload, MakePayload(999, 50));
            await log.WaitUntilDurableAsync(more, Ct);
            written.Add((more, MakePayload(999, 50)));
        }

        logger = new CapturingLogger();
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger, Ct))
        {
            Assert.Empty(logger.At(LogLevel.Warning));
            await AssertHoldsAsync(log, written);
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task TornTail_LastCommitWriteLost_RecoversToThePreviousCommit(bool sizeKept)
    {
        using var dir = new TempDirectory();
        var written = await WriteCommittedAsync(dir.Path, commits: 6, perCommit: 3);
        var lastBatch = written[^3..];

        // The last commit's write was lost in a power cut (never acknowledged; the commit metadata, written only after a
        // commit is durable, knew at most the previous commit). The file keeps whole sectors: either its old length (the
        // sector holding the previous commit's end) or its new length with the sectors that never reached the disk zeroed.
        var previousEnd = lastBatch[0].Lsn;
        File.Delete(dir.Combine(CommitMetadataFile.FileName));
        CommitMetadataFile.Create(dir.Combine(CommitMetadataFile.FileName), new CommitMetadata(0, FasterEntryLayout.FirstValidAddress, previousEnd, 1)).Dispose();
        var keepUntil = SegmentFiles.CeilSector(previousEnd + 1);
        var segment = SegmentPath(dir.Path, previousEnd);
        using (var stream = new FileStream(segment, FileMode.Open, FileAccess.Write))
        {
            var length = stream.Length;
            stream.SetLength(FileOffset(keepUntil));
            if (sizeKept)
            {
                stream.SetLength(length);
            }
        }

        foreach (var (later, _) in SegmentFiles.List(dir.Path).Where(s => s.Key > (int)(previousEnd >> 16)))
        {
            File.Delete(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), later));
        }

        var logger = new CapturingLogger();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger, Ct);

        // The previous commit record ends exactly where the torn batch's first record began.
        Assert.Equal(previousEnd, log.DurableUntil);
        var warning = Assert.Single(logger.At(LogLevel.Warning), e => e.Id.Id == 1001);
        Assert.DoesNotContain("never", warning.Message, StringComparison.Ordinal);
        await AssertHoldsAsync(log, written[..^3]);
        Assert.DoesNotContain(await ReadAllAsync(log), r => r.Lsn >= previousEnd);
    }

    [Fact]
    public async Task CorruptCommittedRecord_BitFlipAnywhereInIt_OpenFailsNamingTheAddress()
    {
        using var pristine = new TempDirectory();
        var written = await WriteCommittedAsync(pristine.Path, commits: 4, perCommit: 5, size: 200);
        var targets = new[] { written[0], written[7], written[^1] };
        var random = new Random(3);
        var cases = 0;
        foreach (var (lsn, payload) in targets)
        {
            var entrySize = FasterEntryLayout.EntrySize(RecordEnvelope.HeaderSize + payload.CalculateSize());
            var offsets = new List<int> { 0, 7, 8, 11, 12, 16, 17, 18, 20, 28, 31, entrySize - 1 };
            offsets.AddRange(Enumerable.Range(0, 8).Select(_ => random.Next(0, entrySize)));
            foreach (var offset in offsets)
            {
                using var dir = new TempDirectory();
                CopyDirectory(pristine.Path, dir.Path);
                FlipBit(SegmentPath(dir.Path, lsn), FileOffset(lsn) + offset, random.Next(0, 8));

                LogCorruptionException? error = null;
                try
                {
                    await (await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct)).DisposeAsync();
                }
                catch (LogCorruptionException ex)
                {
                    error = ex;
                }

                Assert.True(error is not null, $"a bit flip at offset {offset} of the record at {lsn} (entry of {entrySize} bytes) went undetected");
                Assert.Equal(lsn, error.Address);
                Assert.Contains($"address {lsn}", error.Message, StringComparison.Ordinal);
                Assert.Equal(SegmentPath(dir.Path, lsn), error.File);
                cases++;
            }
        }

        Assert.Equal(targets.Length * 20, cases);
    }

    [Fact]
    public async Task CorruptCommitRecord_BeforeTheLastCommit_OpenFailsNamingItsAddress()
    {
        using var dir = new TempDirectory();
        var written = await WriteCommittedAsync(dir.Path, commits: 3, perCommit: 2, size: 100);

        // The first commit record follows the second record.
        var secondEntry = FasterEntryLayout.EntrySize(RecordEnvelope.HeaderSize + written[1].Payload.CalculateSize());
        var commitRecord = written[1].Lsn + secondEntry;
        FlipBit(SegmentPath(dir.Path, commitRecord), FileOffset(commitRecord) + 30, 2);

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct));

        Assert.Equal(commitRecord, error.Address);
    }

    [Fact]
    public async Task CommitMetadataDeleted_RecoversFromTheCommitRecordsInTheLog()
    {
        using var dir = new TempDirectory();
        var written = await WriteCommittedAsync(dir.Path, commits: 20, perCommit: 10);
        File.Delete(dir.Combine(CommitMetadataFile.FileName));

        var logger = new CapturingLogger();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger, Ct);

        Assert.True(log.OpenReport.RecoveredWithoutMetadata);
        Assert.Contains(logger.At(LogLevel.Warning), e => e.Id.Id == 1003);
        await AssertHoldsAsync(log, written);
        Assert.True(File.Exists(dir.Combine(CommitMetadataFile.FileName)), "the metadata is rewritten");
    }

    [Fact]
    public async Task CommitMetadataBothSlotsDamaged_RecoversFromTheLog()
    {
        using var dir = new TempDirectory();
        var written = await WriteCommittedAsync(dir.Path, commits: 5, perCommit: 5);
        var meta = dir.Combine(CommitMetadataFile.FileName);
        FlipBit(meta, 10, 1);
        FlipBit(meta, 512 + 10, 1);

        var logger = new CapturingLogger();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger, Ct);

        Assert.Contains(logger.At(LogLevel.Warning), e => e.Id.Id == 1002 && e.Message.Contains("slot 0", StringComparison.Ordinal));
        await AssertHoldsAsync(log, written);
    }

    [Fact]
    public async Task CommitMetadataDeleted_AfterTruncationRemovedSegmentZero_BeginComesFromTheTruncationRecord()
    {
        using var dir = new TempDirectory();
        List<(long Lsn, Payload Payload)> kept;
        long cut;
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            var written = new List<(long Lsn, Payload Payload)>();
            for (uint i = 0; i < 300; i++)
            {
                var payload = MakePayload(i, 900);
                written.Add((log.Append(RecordKind.Payload, payload), payload));
            }

            await log.WaitUntilDurableAsync(written[^1].Lsn, Ct);
            cut = written[250].Lsn;
            await log.TruncateUntilAsync(cut, Ct);
            kept = written[250..];
        }

        Assert.True(SegmentFiles.List(dir.Path).Keys.Min() > 0);
        File.Delete(dir.Combine(CommitMetadataFile.FileName));

        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            Assert.Equal(cut, log.BeginAddress);
            await AssertHoldsAsync(log, kept);
            Assert.DoesNotContain(await ReadAllAsync(log), r => r.Lsn < cut);
        }
    }

    [Fact]
    public async Task CommitMetadataDeleted_AndOldestSegmentWithoutTruncationRecord_FailsClearly()
    {
        using var dir = new TempDirectory();
        await WriteCommittedAsync(dir.Path, commits: 30, perCommit: 10, size: 1000);
        Assert.True(SegmentFiles.List(dir.Path).Count > 2);
        File.Delete(dir.Combine(CommitMetadataFile.FileName));
        File.Delete(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), 0));

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct));

        Assert.Contains("cannot be verified", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task SegmentFilesDeleted_WhileMetadataRecordsCommits_NeverStartsEmpty()
    {
        using var dir = new TempDirectory();
        await WriteCommittedAsync(dir.Path, commits: 3, perCommit: 3);
        foreach (var (segment, _) in SegmentFiles.List(dir.Path))
        {
            File.Delete(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), segment));
        }

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct));

        Assert.Contains("Refusing to start from an empty log", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task SegmentShorterThanTheMetadataSays_FailsInsteadOfLosingCommits()
    {
        using var dir = new TempDirectory();
        var written = await WriteCommittedAsync(dir.Path, commits: 4, perCommit: 3);
        var (metadata, _) = CommitMetadataFile.Read(dir.Combine(CommitMetadataFile.FileName));
        var committed = metadata!.Value.CommittedUntil;
        using (var stream = new FileStream(SegmentPath(dir.Path, written[0].Lsn), FileMode.Open, FileAccess.Write))
        {
            stream.SetLength(FileOffset(written[1].Lsn));
        }

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct));

        Assert.Contains($"committed until {committed}", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData(WriteFault.FailBeforeWrite, FaultInjectingDevice.Eio)]
    [InlineData(WriteFault.FailAfterWrite, FaultInjectingDevice.Eio)]
    [InlineData(WriteFault.FailBeforeWrite, FaultInjectingDevice.Enospc)]
    public async Task WriteOrFlushError_AllWaitersFail_NothingLaterIsDurable_AppendsRefusedUntilReopen(WriteFault fault, uint errorCode)
    {
        using var dir = new TempDirectory();
        FaultInjectingDevice? device = null;
        var acknowledged = new List<(long Lsn, Payload Payload)>();
        var logger = new CapturingLogger();
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path, LogTestOptions.Faulty(d => device = d)), logger, Ct))
        {
            for (uint i = 0; i < 10; i++)
            {
                var payload = MakePayload(i, 100);
                var lsn = log.Append(RecordKind.Payload, payload);
                await log.WaitUntilDurableAsync(lsn, Ct);
                acknowledged.Add((lsn, payload));
            }

            var durableBefore = log.DurableUntil;
            device!.ErrorCode = errorCode;
            device.Fault = fault;
            var appended = Enumerable.Range(0, 8).Select(i => log.Append(RecordKind.Payload, MakePayload((uint)(100 + i), 100))).ToList();
            var waits = appended.Select(lsn => log.WaitUntilDurableAsync(lsn, Ct).AsTask()).ToList();

            foreach (var wait in waits)
            {
                await Assert.ThrowsAsync<LogFaultedException>(() => wait);
            }

            Assert.Equal(durableBefore, log.DurableUntil);
            Assert.Throws<LogFaultedException>(() => log.Append(RecordKind.Payload, MakePayload(200, 10)));
            device.Fault = WriteFault.None;
            Assert.Throws<LogFaultedException>(() => log.Append(RecordKind.Payload, MakePayload(201, 10)));
            Assert.Equal(durableBefore, log.DurableUntil);
            Assert.Contains(logger.At(LogLevel.Error), e => e.Id.Id == 1004);
        }

        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            await AssertHoldsAsync(log, acknowledged);
            var lsn = log.Append(RecordKind.Payload, MakePayload(300, 100));
            await log.WaitUntilDurableAsync(lsn, Ct);
            acknowledged.Add((lsn, MakePayload(300, 100)));
        }

        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            await AssertHoldsAsync(log, acknowledged);
        }
    }

    [Fact]
    public async Task DiskFull_OnASmallFilesystem_FaultsThenWorksAfterReopenWithSpace()
    {
        if (!OperatingSystem.IsLinux() || Environment.UserName != "root")
        {
            Assert.Skip("needs root on Linux to mount a small tmpfs");
        }

        using var dir = new TempDirectory();
        if (!Run("mount", $"-t tmpfs -o size=256k tmpfs {dir.Path}"))
        {
            Assert.Skip("mount -t tmpfs is not permitted here");
        }

        try
        {
            var acknowledged = new List<(long Lsn, Payload Payload)>();
            var logDir = Path.Combine(dir.Path, "log");
            var options = LogTestOptions.Small(logDir);
            await using (var log = await DurableLog.OpenAsync(options, cancellationToken: Ct))
            {
                LogFaultedException? fault = null;
                for (uint i = 0; i < 10_000 && fault is null; i++)
                {
                    var payload = MakePayload(i, 2000);
                    try
                    {
                        var lsn = log.Append(RecordKind.Payload, payload);
                        await log.WaitUntilDurableAsync(lsn, Ct);
                        acknowledged.Add((lsn, payload));
                    }
                    catch (LogFaultedException ex)
                    {
                        fault = ex;
                    }
                }

                Assert.NotNull(fault);
                Assert.NotEmpty(acknowledged);
                Assert.Throws<LogFaultedException>(() => log.Append(RecordKind.Payload, MakePayload(1, 10)));
            }

            Assert.True(Run("mount", $"-o remount,size=4m {dir.Path}"), "remount with more space");
            await using (var log = await DurableLog.OpenAsync(options, cancellationToken: Ct))
            {
                await AssertHoldsAsync(log, acknowledged);
                var lsn = log.Append(RecordKind.Payload, MakePayload(77, 2000));
                await log.WaitUntilDurableAsync(lsn, Ct);
            }
        }
        finally
        {
            Run("umount", $"-l {dir.Path}");
        }
    }

    private static bool Run(string command, string arguments)
    {
        using var process = System.Diagnostics.Process.Start(new System.Diagnostics.ProcessStartInfo(command, arguments)
        {
            RedirectStandardError = true,
            RedirectStandardOutput = true,
        })!;
        process.WaitForExit();
        return process.ExitCode == 0;
    }
}
