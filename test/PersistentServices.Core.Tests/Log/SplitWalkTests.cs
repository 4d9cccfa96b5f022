using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// The open's verification walks a long log in two halves at once (LogRecoveryScanner.WalkInTwo). Whatever the files hold,
/// intact or damaged from outside or torn by a crash, the result must be the one a single walk gives: the same committed
/// end, begin address, counts, torn tail and the same problems in the same words.
/// </summary>
public sealed class SplitWalkTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static Payload MakePayload(uint tag, int size)
    {
        var bytes = new byte[size];
        new Random((int)tag + 11).NextBytes(bytes);
        return new Payload { Tag = tag, Data = ByteString.CopyFrom(bytes) };
    }

    /// <summary>A log of about 40 pages over 10 segments, with truncations in it; the metadata as it was after the commit before last.</summary>
    internal static async Task<(List<long> Lsns, byte[] MetadataBeforeLastCommit, long LastCommitStart, long End)> WriteAsync(string directory)
    {
        var lsns = new List<long>();
        var log = await DurableLog.OpenAsync(LogTestOptions.Small(directory), cancellationToken: Ct);
        var random = new Random(3);
        for (uint i = 0; i < 500; i++)
        {
            lsns.Add(log.Append(RecordKind.Payload, MakePayload(i, random.Next(100, 2000))));
            if (i == 300)
            {
                // A LogTruncated record that more than a page of records follows before their commit: some page boundary
                // lies between it and the commit that makes it count (one walker carries it over; two must join it).
                log.Append(RecordKind.LogTruncated, new LogTruncated { UntilLsn = lsns[61] });
            }

            if (i % 7 == 6 && i is < 300 or > 340)
            {
                await log.WaitUntilDurableAsync(lsns[^1], Ct);
            }

            if (i == 120)
            {
                await log.WaitUntilDurableAsync(lsns[^1], Ct);
                await log.TruncateUntilAsync(lsns[60], Ct);
            }
        }

        await log.WaitUntilDurableAsync(lsns[^1], Ct);
        await WaitForMetadataAsync(log);
        var metadata = File.ReadAllBytes(Path.Combine(directory, CommitMetadataFile.FileName));
        var body = MakePayload(9999, 500);
        var last = log.Append(RecordKind.Payload, body);
        await log.WaitUntilDurableAsync(last, Ct);
        lsns.Add(last);
        var lastCommitStart = last + FasterEntryLayout.EntrySize(RecordEnvelope.HeaderSize + body.CalculateSize());
        var end = log.DurableUntil;
        await log.DisposeAsync();
        return (lsns, metadata, lastCommitStart, end);
    }

    private static async Task WaitForMetadataAsync(DurableLog log)
    {
        for (var i = 0; i < 500 && log.MetadataFloor < log.DurableUntil; i++)
        {
            await Task.Delay(2, Ct);
        }
    }

    internal static void WriteAt(string directory, long address, byte[] bytes)
    {
        var options = LogTestOptions.Small(directory);
        var segment = (int)(address >> options.SegmentSizeBits);
        using var file = File.OpenHandle(SegmentFiles.PathOf(SegmentFiles.BasePath(directory), segment), FileMode.Open, FileAccess.ReadWrite);
        RandomAccess.Write(file, bytes, address & ((1L << options.SegmentSizeBits) - 1));
    }

    internal static void Flip(string directory, long address)
    {
        var options = LogTestOptions.Small(directory);
        var path = SegmentFiles.PathOf(SegmentFiles.BasePath(directory), (int)(address >> options.SegmentSizeBits));
        var bytes = File.ReadAllBytes(path);
        bytes[address & ((1L << options.SegmentSizeBits) - 1)] ^= 0x5A;
        File.WriteAllBytes(path, bytes);
    }

    /// <summary>
    /// Damages the log <see cref="WriteAsync"/> wrote as <see cref="Damages"/> names: a torn tail, a flipped bit early or
    /// late (in a record, or in a commit record), zeros over records, garbage after the data, a segment missing.
    /// </summary>
    internal static void ApplyDamage(string directory, string damage, LogOptions options, List<long> lsns, byte[] metadataBeforeLastCommit, long lastCommitStart, long end)
    {
        switch (damage)
        {
            case "torn-tail" or "no-metadata":
                Damage(directory, damage, metadataBeforeLastCommit, lastCommitStart, end);
                break;
            case "flip-early":
                Flip(directory, lsns[150] + 40);
                break;
            case "flip-late":
                Flip(directory, lsns[420] + 40);
                break;
            case "flip-commit-late":
                Flip(directory, lsns[419] - 8);
                break;
            case "zeros-late":
                WriteAt(directory, lsns[400], new byte[3000]);
                break;
            case "garbage-after-data":
                File.AppendAllText(SegmentFiles.PathOf(SegmentFiles.BasePath(directory), SegmentFiles.List(directory).Keys.Max()), "garbage");
                break;
            case "segment-missing":
                File.Delete(SegmentFiles.PathOf(SegmentFiles.BasePath(directory), (int)(lsns[300] >> options.SegmentSizeBits)));
                break;
        }
    }

    /// <summary>"torn-tail": the last commit record never reached the disk, nor the metadata that followed it. "no-metadata": commit.meta lost.</summary>
    internal static void Damage(string directory, string damage, byte[] metadataBeforeLastCommit, long lastCommitStart, long end)
    {
        var metadataPath = Path.Combine(directory, CommitMetadataFile.FileName);
        if (damage == "torn-tail")
        {
            File.WriteAllBytes(metadataPath, metadataBeforeLastCommit);
            WriteAt(directory, lastCommitStart, new byte[end - lastCommitStart]);
        }
        else if (damage == "no-metadata")
        {
            File.Delete(metadataPath);
        }
    }

    internal static void AssertSameFindings(LogScanResult one, LogScanResult two)
    {
        Assert.Equal(one.BeginAddress, two.BeginAddress);
        Assert.Equal(one.CommittedUntil, two.CommittedUntil);
        Assert.Equal(one.CommitNum, two.CommitNum);
        Assert.Equal(one.RecordsVerified, two.RecordsVerified);
        Assert.Equal(one.TornTail, two.TornTail);
        Assert.Equal(one.UncommittedRecords, two.UncommittedRecords);
        Assert.Equal(one.TailReason, two.TailReason);
        Assert.Equal(one.RecoveredWithoutMetadata, two.RecoveredWithoutMetadata);
        Assert.Equal(one.Problems.Select(p => p.Message), two.Problems.Select(p => p.Message));
    }

    public static TheoryData<string> Damages => new()
    {
        "none", "torn-tail", "flip-early", "flip-late", "flip-commit-late", "zeros-late", "no-metadata", "garbage-after-data", "segment-missing",
    };

    [Theory]
    [MemberData(nameof(Damages))]
    public async Task TwoWalkers_FindWhatOneWalkerFinds(string damage)
    {
        using var dir = new TempDirectory();
        var (lsns, metadata, lastCommitStart, end) = await WriteAsync(dir.Path);
        var options = LogTestOptions.Small(dir.Path);
        var metadataPath = Path.Combine(dir.Path, CommitMetadataFile.FileName);
        Assert.True(SegmentFiles.List(dir.Path).Count >= 8, "the log must be long enough to be walked in two");
        ApplyDamage(dir.Path, damage, options, lsns, metadata, lastCommitStart, end);

        var (recorded, _) = CommitMetadataFile.Read(metadataPath);
        var one = LogRecoveryScanner.Scan(dir.Path, options, recorded, walkInTwo: false);
        var two = LogRecoveryScanner.Scan(dir.Path, options, recorded, walkInTwo: true);

        Assert.False(one.WalkedInTwo);
        Assert.Equal(damage != "flip-early", two.WalkedInTwo); // damage in the first half: walked once again
        AssertSameFindings(one, two);
        if (damage == "none")
        {
            Assert.Empty(two.Problems);
            Assert.Null(two.TornTail);
            Assert.Equal(end, two.CommittedUntil);
        }
    }

    [Theory]
    [InlineData("none")]
    [InlineData("torn-tail")]
    [InlineData("no-metadata")]
    public async Task TwoWalkers_MeetingAtAnyPage_FindWhatOneWalkerFinds(string damage)
    {
        using var dir = new TempDirectory();
        var (_, metadata, lastCommitStart, end) = await WriteAsync(dir.Path);
        var options = LogTestOptions.Small(dir.Path);
        var metadataPath = Path.Combine(dir.Path, CommitMetadataFile.FileName);
        Damage(dir.Path, damage, metadata, lastCommitStart, end);
        var (recorded, _) = CommitMetadataFile.Read(metadataPath);
        var one = LogRecoveryScanner.Scan(dir.Path, options, recorded, walkInTwo: false);
        var splits = 0;
        for (var split = (long)options.PageSize; split < end; split += options.PageSize)
        {
            var two = LogRecoveryScanner.Scan(dir.Path, options, recorded, splitAt: split);
            splits += two.WalkedInTwo ? 1 : 0;
            AssertSameFindings(one, two);
        }

        Assert.True(splits > 20, $"walked in two at {splits} page boundaries");
    }
}
