using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// The records the open's verification walk keeps for recovery's analysis scan are exactly the committed records a scan
/// of the opened log returns from the same LSN: none of a torn tail, none missing at the budget's edge.
/// </summary>
public sealed class RecordCaptureTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static async Task<List<LogRecord>> ScanAsync(DurableLog log, long from)
    {
        var records = new List<LogRecord>();
        await foreach (var record in log.ScanAsync(from, cancellationToken: Ct))
        {
            records.Add(record);
        }

        return records;
    }

    private static Payload MakePayload(uint tag, int size)
    {
        var bytes = new byte[size];
        new Random((int)tag).NextBytes(bytes);
        return new Payload { Tag = tag, Data = ByteString.CopyFrom(bytes) };
    }

    /// <summary>Writes <paramref name="count"/> committed records across pages and segments; returns their LSNs.</summary>
    private static async Task<List<long>> WriteAsync(string directory, int count)
    {
        var lsns = new List<long>();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(directory), cancellationToken: Ct);
        var random = new Random(7);
        for (uint i = 0; i < count; i++)
        {
            lsns.Add(log.Append(RecordKind.Payload, MakePayload(i, random.Next(0, 2500))));
            if (i % 50 == 49)
            {
                await log.WaitUntilDurableAsync(lsns[^1], Ct);
            }
        }

        await log.WaitUntilDurableAsync(lsns[^1], Ct);
        return lsns;
    }

    private static void AssertSame(List<LogRecord> expected, IEnumerable<LogRecord> actual)
    {
        var got = actual.ToList();
        Assert.Equal(expected.Select(r => r.Lsn), got.Select(r => r.Lsn));
        Assert.Equal(expected.Select(r => r.Kind), got.Select(r => r.Kind));
        for (var i = 0; i < expected.Count; i++)
        {
            Assert.True(expected[i].Body.Span.SequenceEqual(got[i].Body.Span), $"record at LSN {expected[i].Lsn} differs");
        }
    }

    [Fact]
    public async Task Capture_HoldsEveryCommittedRecordFromItsStart_AsAScanOfTheOpenedLogReadsThem()
    {
        using var dir = new TempDirectory();
        var lsns = await WriteAsync(dir.Path, 600);
        var capture = new RecordCapture(lsns[200], singles: [lsns[3], lsns[150], lsns[150] + 1]);

        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger: null, capture, metrics: null, crashPoints: null, Ct);

        Assert.True(SegmentFiles.List(dir.Path).Count > 3, "the test must cross segment boundaries");
        AssertSame(await ScanAsync(log, lsns[200]), capture.Records);
        Assert.Equal(log.DurableUntil, capture.Until);
        Assert.True(capture.TryGetSingle(lsns[3], out var single));
        AssertSame([await log.ReadAsync(lsns[3], Ct)], [single]);
        Assert.True(capture.TryGetSingle(lsns[150], out _));
        Assert.False(capture.TryGetSingle(lsns[150] + 1, out _), "no record starts there");
    }

    [Fact]
    public async Task Capture_OverItsBudget_StopsAtARecord_AndTheLogHoldsTheRest()
    {
        using var dir = new TempDirectory();
        var lsns = await WriteAsync(dir.Path, 400);
        var capture = new RecordCapture(lsns[10], budgetBytes: 64 * 1024);

        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger: null, capture, metrics: null, crashPoints: null, Ct);

        Assert.InRange(capture.Records.Count, 1, 380);
        Assert.Equal(lsns[10 + capture.Records.Count], capture.Until);
        var all = await ScanAsync(log, lsns[10]);
        AssertSame(all, capture.Records.Concat(await ScanAsync(log, capture.Until)));
    }

    [Fact]
    public async Task Capture_OfALogWithATornTail_KeepsOnlyTheCommittedRecords()
    {
        using var dir = new TempDirectory();
        var written = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var first = written.Append(RecordKind.Payload, MakePayload(1, 300));
        await written.WaitUntilDurableAsync(first, Ct);
        var committedUntil = written.DurableUntil;
        var metadata = File.ReadAllBytes(Path.Combine(dir.Path, CommitMetadataFile.FileName));
        written.Append(RecordKind.Payload, MakePayload(3, 100));
        var body = MakePayload(2, 200);
        var lastLsn = written.Append(RecordKind.Payload, body);
        await written.WaitUntilDurableAsync(lastLsn, Ct);
        var durableEnd = written.DurableUntil;
        await written.DisposeAsync();

        // A crash after these two records were written but before their commit record was: zero the commit record, and
        // the commit metadata as it was before (it never learned of that commit).
        File.WriteAllBytes(Path.Combine(dir.Path, CommitMetadataFile.FileName), metadata);
        var lastEnd = lastLsn + FasterEntryLayout.EntrySize(RecordEnvelope.HeaderSize + body.CalculateSize());
        Assert.True(durableEnd > lastEnd, "a commit record follows the last record");
        using (var file = File.OpenHandle(SegmentFiles.PathOf(SegmentFiles.BasePath(dir.Path), 0), FileMode.Open, FileAccess.ReadWrite))
        {
            RandomAccess.Write(file, new byte[durableEnd - lastEnd], lastEnd);
        }

        var capture = new RecordCapture(FasterEntryLayout.FirstValidAddress);
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), logger: null, capture, metrics: null, crashPoints: null, Ct))
        {
            Assert.NotNull(log.OpenReport.TornTail);
            Assert.Equal(committedUntil, log.DurableUntil);
            AssertSame(await ScanAsync(log, log.BeginAddress), capture.Records);
            Assert.All(capture.Records, r => Assert.True(r.Lsn < committedUntil));
            Assert.Equal(committedUntil, capture.Until);
        }
    }
}
