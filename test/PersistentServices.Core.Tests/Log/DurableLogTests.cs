using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

public sealed class DurableLogTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static Payload MakePayload(uint tag, int size)
    {
        var bytes = new byte[size];
        new Random((int)tag).NextBytes(bytes);
        return new Payload { Tag = tag, Data = ByteString.CopyFrom(bytes) };
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

    [Fact]
    public async Task Append_ThenWait_RecordIsDurableAndReadable()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var payload = MakePayload(7, 100);

        var lsn = log.Append(RecordKind.Payload, payload);
        Assert.True(lsn >= log.DurableUntil, "an appended record is not durable before a commit");
        await log.WaitUntilDurableAsync(lsn, Ct);

        Assert.True(lsn < log.DurableUntil);
        var record = await log.ReadAsync(lsn, Ct);
        Assert.Equal(lsn, record.Lsn);
        Assert.Equal(RecordKind.Payload, record.Kind);
        Assert.Equal(payload, record.Parse(Payload.Parser));
    }

    [Fact]
    public async Task Reopen_ManyRecordsAcrossPagesAndSegments_EveryRecordBackWithItsOwnLsn()
    {
        using var dir = new TempDirectory();
        var written = new List<(long Lsn, Payload Payload)>();
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            var random = new Random(42);
            for (uint i = 0; i < 2000; i++)
            {
                var payload = MakePayload(i, random.Next(0, 3000));
                written.Add((log.Append(RecordKind.Payload, payload), payload));
            }

            await log.WaitUntilDurableAsync(written[^1].Lsn, Ct);
        }

        Assert.True(SegmentFiles.List(dir.Path).Count > 3, "the test must cross segment boundaries");
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            Assert.Equal(written.Count, log.OpenReport.RecordsVerified);
            var records = await ReadAllAsync(log);
            Assert.Equal(written.Select(w => w.Lsn), records.Select(r => r.Lsn));
            Assert.Equal(written.Select(w => w.Payload), records.Select(r => r.Parse(Payload.Parser)));
            Assert.Null(log.OpenReport.TornTail);
        }
    }

    [Fact]
    public async Task Reopen_AppendAfterRecovery_ContinuesTheLog()
    {
        using var dir = new TempDirectory();
        long first;
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            first = log.Append(RecordKind.Payload, MakePayload(1, 10));
            await log.WaitUntilDurableAsync(first, Ct);
        }

        long second;
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            second = log.Append(RecordKind.Payload, MakePayload(2, 10));
            Assert.True(second > first);
            await log.WaitUntilDurableAsync(second, Ct);
        }

        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            Assert.Equal([first, second], (await ReadAllAsync(log)).Select(r => r.Lsn));
        }
    }

    [Fact]
    public async Task WaitUntilDurable_ManyConcurrentWriters_ShareCommits()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var commitsBefore = log.Commits;

        var writers = Enumerable.Range(0, 32).Select(w => Task.Run(async () =>
        {
            for (var i = 0; i < 50; i++)
            {
                var lsn = log.Append(RecordKind.Payload, MakePayload((uint)(w * 1000 + i), 64));
                await log.WaitUntilDurableAsync(lsn, Ct);
            }
        }, Ct));
        await Task.WhenAll(writers);

        var commits = log.Commits - commitsBefore;
        Assert.True(commits < 32 * 50, $"{commits} commits for {32 * 50} durable appends: group commit must share commits");
        Assert.Equal(32 * 50, (await ReadAllAsync(log)).Count);
    }

    [Fact]
    public async Task WaitUntilDurable_ConcurrentWritersReadTheirRecordAtOnce_EveryRecordReadable()
    {
        // A record is readable (FASTER reads only below its committed address) as soon as its wait completes, while
        // other writers keep commits going.
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var writers = Enumerable.Range(0, 16).Select(w => Task.Run(async () =>
        {
            for (var i = 0; i < 200; i++)
            {
                var payload = MakePayload((uint)(w * 1000 + i), 40 + (i % 7) * 50);
                var lsn = log.Append(RecordKind.Payload, payload);
                await log.WaitUntilDurableAsync(lsn, Ct);
                Assert.True(lsn < log.DurableUntil);
                Assert.Equal(payload, (await log.ReadAsync(lsn, Ct)).Parse(Payload.Parser));
            }
        }, Ct));
        await Task.WhenAll(writers);

        Assert.Null(log.Fault);
        Assert.Equal(16 * 200, (await ReadAllAsync(log)).Count);
    }

    [Fact]
    public async Task ZeroFill_ZeroedSpaceAfterTheData_ReopensExactly_WithNoTornTail()
    {
        // A fill of one file-system block: a fill starts after nearly every write, so writes meet fills queued and
        // running (DirectFileDevice drops or waits for them), across pages and segments.
        using var dir = new TempDirectory();
        var options = LogTestOptions.Small(dir.Path, (basePath, io) => DurableLog.CreateDefaultDevice(basePath, io, zeroFillBytes: 4096));
        var written = new System.Collections.Concurrent.ConcurrentDictionary<long, Payload>();
        long durable;
        await using (var log = await DurableLog.OpenAsync(options, cancellationToken: Ct))
        {
            await Task.WhenAll(Enumerable.Range(0, 8).Select(w => Task.Run(async () =>
            {
                var random = new Random(w);
                for (var i = 0; i < 150; i++)
                {
                    var payload = MakePayload((uint)(w * 1000 + i), random.Next(0, 2500));
                    var lsn = log.Append(RecordKind.Payload, payload);
                    written[lsn] = payload;
                    await log.WaitUntilDurableAsync(lsn, Ct);
                }
            }, Ct)));
            durable = log.DurableUntil;
            Assert.True(durable >> options.SegmentSizeBits >= 2, "the test crosses segments");
        }

        var segments = SegmentFiles.List(dir.Path);
        Assert.All(segments.Values, length => Assert.Equal(0, length % LogRecoveryScanner.SectorSize));

        for (var reopen = 0; reopen < 2; reopen++)
        {
            var logger = new CapturingLogger();
            await using var log = await DurableLog.OpenAsync(options, logger, Ct);
            Assert.Equal(durable, log.DurableUntil);
            Assert.Empty(logger.At(Microsoft.Extensions.Logging.LogLevel.Warning));
            var records = await ReadAllAsync(log);
            Assert.Equal(written.Keys.Order(), records.Select(r => r.Lsn).Where(written.ContainsKey));
            Assert.All(records.Where(r => written.ContainsKey(r.Lsn)), r => Assert.Equal(written[r.Lsn], r.Parse(Payload.Parser)));

            // Appending after a reopen writes over the zeroed space; the next open finds that too.
            var payload = MakePayload((uint)(9000 + reopen), 700);
            var lsn = log.Append(RecordKind.Payload, payload);
            written[lsn] = payload;
            await log.WaitUntilDurableAsync(lsn, Ct);
            durable = log.DurableUntil;
        }
    }

    [Theory]
    [InlineData(0)] // off: the segment file ends at the data
    [InlineData(8192)]
    public async Task ZeroFillBytes_Option_SetsTheZeroedSpaceAheadOfTheTail(int zeroFill)
    {
        using var dir = new TempDirectory();
        var options = LogTestOptions.Small(dir.Path);
        options.ZeroFillBytes = zeroFill;
        await using var log = await DurableLog.OpenAsync(options, cancellationToken: Ct);
        var lsn = log.Append(RecordKind.Payload, MakePayload(1, 300));
        await log.WaitUntilDurableAsync(lsn, Ct);
        var dataEnd = SegmentFiles.CeilSector(log.DurableUntil);
        long Length() => SegmentFiles.List(dir.Path)[0];

        // The fill runs on the thread pool: give it time to reach its size (with 0, 200 ms to show one that should not
        // run: a fill takes a few milliseconds here).
        for (var i = 0; i < (zeroFill == 0 ? 20 : 100) && Length() < dataEnd + Math.Max(zeroFill, 4096); i++)
        {
            await Task.Delay(10, Ct);
        }

        if (zeroFill == 0)
        {
            Assert.Equal(dataEnd, Length());
        }
        else
        {
            Assert.InRange(Length(), dataEnd + zeroFill, dataEnd + 2L * zeroFill + 4096);
        }
    }

    [Theory]
    [InlineData(-4096)]
    [InlineData(1000)]
    [InlineData((1 << 30) + 4096)]
    public void ZeroFillBytes_Invalid_IsRefusedNamingTheOption(int zeroFill)
    {
        var options = LogTestOptions.Small("/tmp/unused");
        options.ZeroFillBytes = zeroFill;
        var error = Assert.Throws<ArgumentException>(options.Validate);
        Assert.Contains("ZeroFillBytes", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task IdleLog_IssuesNoCommits()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var lsn = log.Append(RecordKind.Payload, MakePayload(1, 10));
        await log.WaitUntilDurableAsync(lsn, Ct);
        var commits = log.Commits;

        await Task.Delay(200, Ct);
        await log.WaitUntilDurableAsync(lsn, Ct);

        Assert.Equal(commits, log.Commits);
    }

    [Fact]
    public async Task Append_BodyOverTheLimit_ThrowsAndLogsNothing()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var tail = log.TailAddress;

        var error = Assert.Throws<ArgumentException>(() => log.Append(RecordKind.Payload, MakePayload(1, 5000)));

        Assert.Contains("MaxRecordBytes", error.Message, StringComparison.Ordinal);
        Assert.Equal(tail, log.TailAddress);
    }

    [Fact]
    public async Task TruncateUntil_DropsEarlierRecordsAndSegments_AndSurvivesReopen()
    {
        using var dir = new TempDirectory();
        var lsns = new List<long>();
        long cut;
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            for (uint i = 0; i < 400; i++)
            {
                lsns.Add(log.Append(RecordKind.Payload, MakePayload(i, 1000)));
            }

            await log.WaitUntilDurableAsync(lsns[^1], Ct);
            cut = lsns[300];
            await log.TruncateUntilAsync(cut, Ct);

            Assert.Equal(cut, log.BeginAddress);
            var records = await ReadAllAsync(log);
            Assert.Equal(lsns.Skip(300), records.Where(r => r.Kind == RecordKind.Payload).Select(r => r.Lsn));
        }

        Assert.True(SegmentFiles.List(dir.Path).Keys.Min() > 0, "segment files wholly before the cut are deleted");
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            Assert.Equal(cut, log.BeginAddress);
            var records = await ReadAllAsync(log);
            Assert.Equal(lsns.Skip(300), records.Where(r => r.Kind == RecordKind.Payload).Select(r => r.Lsn));
            Assert.Equal(cut, records.Single(r => r.Kind == RecordKind.LogTruncated).Parse(LogTruncated.Parser).UntilLsn);
        }
    }

    [Fact]
    public async Task TruncateUntil_NotARecordBoundary_Throws()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var a = log.Append(RecordKind.Payload, MakePayload(1, 100));
        var b = log.Append(RecordKind.Payload, MakePayload(2, 100));
        await log.WaitUntilDurableAsync(b, Ct);

        await Assert.ThrowsAnyAsync<Exception>(async () => await log.TruncateUntilAsync(a + 4, Ct));
        Assert.Equal(a, log.BeginAddress);
    }

    [Fact]
    public async Task Open_SecondInstanceOnTheSameDirectory_Fails()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);

        var error = await Assert.ThrowsAsync<IOException>(() => DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct));

        Assert.Contains("in use by another process", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Open_InvalidOptions_ThrowsNamingTheOption()
    {
        using var dir = new TempDirectory();
        var options = LogTestOptions.Small(dir.Path);
        options.MaxRecordBytes = 1 << 20;

        var error = await Assert.ThrowsAsync<ArgumentException>(() => DurableLog.OpenAsync(options, cancellationToken: Ct));

        Assert.Contains("MaxRecordBytes", error.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Dispose_CommitsWhatWasAppended()
    {
        using var dir = new TempDirectory();
        long lsn;
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            lsn = log.Append(RecordKind.Payload, MakePayload(3, 10));
        }

        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct))
        {
            Assert.Equal([lsn], (await ReadAllAsync(log)).Select(r => r.Lsn));
        }
    }
}
