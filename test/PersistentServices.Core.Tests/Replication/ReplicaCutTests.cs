using System.Buffers.Binary;
using Google.Protobuf;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Replication;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Replication;

/// <summary>
/// A replica cut back to where the next term began (docs/replication.md, "Rejoining by cutting back"): an old primary's
/// copy keeps every byte below the cut point and opens as a log that ends there; a crash in the middle of a cut is
/// finished by the next open; a cut whose checksum is not the replica's own bytes' is refused (diverged) and changes
/// nothing. The copy learns where each term's part begins (<see cref="TermHistory"/>).
/// </summary>
public sealed class ReplicaCutTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static async Task<List<(long Lsn, uint Tag)>> AppendAsync(DurableLog log, int count, uint firstTag)
    {
        var written = new List<(long, uint)>();
        var random = new Random((int)firstTag);
        for (var i = 0; i < count; i++)
        {
            var bytes = new byte[random.Next(0, 2500)];
            random.NextBytes(bytes);
            var lsn = log.Append(RecordKind.Payload, new Payload { Tag = firstTag + (uint)i, Data = ByteString.CopyFrom(bytes) });
            written.Add((lsn, firstTag + (uint)i));
            if (i % 7 == 6 || i == count - 1)
            {
                await log.WaitUntilDurableAsync(lsn, Ct);
            }
        }

        return written;
    }

    private static ShipmentResult Ship(DurableLog primary, ReplicaLog replica, long term)
    {
        using var reader = new CommittedLogReader(primary.Directory, primary.SegmentSizeBits);
        var until = primary.LocalDurableUntil;
        var reset = replica.IsEmpty || replica.DurableUntil < primary.BeginAddress;
        var from = reset ? primary.BeginAddress : replica.DurableUntil;
        var bytes = new byte[until - from];
        Assert.True(reader.TryRead(from, bytes));
        return replica.Append(new Shipment(term, from, primary.BeginAddress, 0, reset, bytes));
    }

    private static byte[] Bytes(string directory, long from, long until)
    {
        using var reader = new CommittedLogReader(directory, LogTestOptions.Small(directory).SegmentSizeBits);
        var bytes = new byte[until - from];
        Assert.True(reader.TryRead(from, bytes));
        return bytes;
    }

    private static async Task<List<(long Lsn, uint Tag)>> ReadAllAsync(DurableLog log)
    {
        var records = new List<(long, uint)>();
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            if (record.Kind == RecordKind.Payload)
            {
                records.Add((record.Lsn, record.Parse(Payload.Parser).Tag));
            }
        }

        return records;
    }

    /// <summary>
    /// The old primary of term 1 (its copy in <paramref name="oldDir"/>, closed) holds [begin, its end) of term 1; the new
    /// primary of term 2 (<paramref name="newDir"/>, open) took over from a replica that held term 1's log until the cut
    /// point E, and wrote records of its own from there.
    /// </summary>
    private static async Task<(DurableLog NewPrimary, long Cut, long OldEnd, List<(long Lsn, uint Tag)> Common, List<(long Lsn, uint Tag)> NewOnes)> ForkAsync(
        string oldDir, string newDir)
    {
        using var primaryDir = new TempDirectory();
        List<(long Lsn, uint Tag)> common;
        long cut, oldEnd;
        await using (var first = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct))
        {
            using var old = ReplicaLog.Open(LogTestOptions.Small(oldDir), NullLogger.Instance);
            using (var taker = ReplicaLog.Open(LogTestOptions.Small(newDir), NullLogger.Instance))
            {
                common = await AppendAsync(first, 120, 1);
                Assert.Equal(ShipmentOutcome.Appended, Ship(first, old, term: 1).Outcome);
                Assert.Equal(ShipmentOutcome.Appended, Ship(first, taker, term: 1).Outcome);
                cut = taker.DurableUntil;
            }

            // Term 1's tail that the replica taking over never got (never acknowledged by a majority).
            await AppendAsync(first, 60, 1000);
            Assert.Equal(ShipmentOutcome.Appended, Ship(first, old, term: 1).Outcome);
            oldEnd = old.DurableUntil;
        }

        var promoted = await DurableLog.OpenAsync(LogTestOptions.Small(newDir), cancellationToken: Ct);
        Assert.Equal(cut, promoted.LocalDurableUntil);
        var newOnes = await AppendAsync(promoted, 50, 5000);
        Assert.True(oldEnd > cut);
        return (promoted, cut, oldEnd, common, newOnes);
    }

    private static Shipment CutAt(DurableLog primary, ReplicaLog replica, long cut, long term = 2)
    {
        var from = ReplicaLog.CutSumFrom(primary.BeginAddress, replica.Begin, cut);
        return new Shipment(term, cut, primary.BeginAddress, 0, false, ReadOnlyMemory<byte>.Empty, Cut: cut, CutSum: Crc32C.Compute(Bytes(primary.Directory, from, cut)));
    }

    [Fact]
    public async Task ACut_KeepsEveryByteBelowTheCutPoint_AndTheCopyOpensAsALogEndingThere()
    {
        using var oldDir = new TempDirectory();
        using var newDir = new TempDirectory();
        var (primary, cut, oldEnd, common, _) = await ForkAsync(oldDir.Path, newDir.Path);
        await using (primary)
        {
            using var old = ReplicaLog.Open(LogTestOptions.Small(oldDir.Path), NullLogger.Instance);
            Assert.Equal(oldEnd, old.DurableUntil);
            var below = Bytes(oldDir.Path, old.Begin, cut);

            var result = old.Append(CutAt(primary, old, cut));

            Assert.Equal(ShipmentOutcome.Appended, result.Outcome);
            Assert.Equal(cut, result.DurableUntil);
            Assert.Equal(cut, old.DurableUntil);
            Assert.Equal(1, old.Cuts);
            Assert.Equal(0, old.Resets);
            Assert.Equal(1, old.Snapshot().Resets); // a hot follower starts over, as after a reset
            Assert.Equal(1, old.ContentTerm);
            Assert.False(File.Exists(Path.Combine(oldDir.Path, ReplicaLog.CutMarkerFileName)));
            Assert.Equal(below, Bytes(oldDir.Path, old.Begin, cut));
        }

        await using var reopened = await DurableLog.OpenAsync(LogTestOptions.Small(oldDir.Path), cancellationToken: Ct);
        Assert.Equal(cut, reopened.LocalDurableUntil);
        Assert.Equal(common, await ReadAllAsync(reopened));
    }

    [Fact]
    public async Task AfterACut_ThePrimaryShipsFromTheCutPoint_AndTheCopyIsThePrimarysLog()
    {
        using var oldDir = new TempDirectory();
        using var newDir = new TempDirectory();
        var (primary, cut, _, common, newOnes) = await ForkAsync(oldDir.Path, newDir.Path);
        await using (primary)
        {
            using var old = ReplicaLog.Open(LogTestOptions.Small(oldDir.Path), NullLogger.Instance);
            Assert.Equal(1, old.History.LastTerm);
            Assert.Equal(ShipmentOutcome.Appended, old.Append(CutAt(primary, old, cut)).Outcome);
            Assert.Equal(ShipmentOutcome.Appended, Ship(primary, old, term: 2).Outcome);
            Assert.Equal(primary.LocalDurableUntil, old.DurableUntil);
            Assert.Equal(2, old.ContentTerm);
            Assert.Equal([new TermStart(1, primary.BeginAddress), new TermStart(2, cut)], old.History.Starts);
            Assert.Equal(0, old.Resets);
        }

        await using var promoted = await DurableLog.OpenAsync(LogTestOptions.Small(oldDir.Path), cancellationToken: Ct);
        Assert.Equal([.. common, .. newOnes], await ReadAllAsync(promoted));
    }

    [Fact]
    public async Task ACutCutShortByACrash_IsFinishedByTheNextOpen()
    {
        using var oldDir = new TempDirectory();
        using var newDir = new TempDirectory();
        var (primary, cut, oldEnd, common, _) = await ForkAsync(oldDir.Path, newDir.Path);
        await primary.DisposeAsync();
        var below = Bytes(oldDir.Path, common[0].Lsn, cut);

        // What a crash just after the marker leaves: the marker, and every file as it was (the floor above the cut point too).
        var marker = new byte[12];
        BinaryPrimitives.WriteInt64LittleEndian(marker, cut);
        BinaryPrimitives.WriteUInt32LittleEndian(marker.AsSpan(8), Crc32C.Compute(marker.AsSpan(0, 8)));
        File.WriteAllBytes(Path.Combine(oldDir.Path, ReplicaLog.CutMarkerFileName), marker);
        Assert.Equal(oldEnd, CommitMetadataFile.Read(Path.Combine(oldDir.Path, CommitMetadataFile.FileName)).Newest!.Value.CommittedUntil);

        using (var old = ReplicaLog.Open(LogTestOptions.Small(oldDir.Path), NullLogger.Instance))
        {
            Assert.Equal(cut, old.DurableUntil);
            Assert.False(File.Exists(Path.Combine(oldDir.Path, ReplicaLog.CutMarkerFileName)));
            Assert.Equal(below, Bytes(oldDir.Path, common[0].Lsn, cut));
        }

        await using var reopened = await DurableLog.OpenAsync(LogTestOptions.Small(oldDir.Path), cancellationToken: Ct);
        Assert.Equal(cut, reopened.LocalDurableUntil);
        Assert.Equal(common, await ReadAllAsync(reopened));
    }

    [Fact]
    public async Task ADamagedCutMarker_StopsTheOpen()
    {
        using var oldDir = new TempDirectory();
        using var newDir = new TempDirectory();
        var (primary, cut, _, _, _) = await ForkAsync(oldDir.Path, newDir.Path);
        await primary.DisposeAsync();
        var marker = new byte[12];
        BinaryPrimitives.WriteInt64LittleEndian(marker, cut);
        File.WriteAllBytes(Path.Combine(oldDir.Path, ReplicaLog.CutMarkerFileName), marker); // no valid CRC

        Assert.Throws<LogCorruptionException>(() => ReplicaLog.Open(LogTestOptions.Small(oldDir.Path), NullLogger.Instance));
    }

    [Fact]
    public async Task ACutWhoseChecksumIsNotTheReplicasBytes_IsDiverged_AndChangesNothing()
    {
        using var oldDir = new TempDirectory();
        using var newDir = new TempDirectory();
        var (primary, cut, oldEnd, _, _) = await ForkAsync(oldDir.Path, newDir.Path);
        await using (primary)
        {
            using var old = ReplicaLog.Open(LogTestOptions.Small(oldDir.Path), NullLogger.Instance);
            var before = Bytes(oldDir.Path, old.Begin, oldEnd);
            var shipment = CutAt(primary, old, cut);

            var wrongSum = old.Append(shipment with { CutSum = shipment.CutSum ^ 1 });
            var elsewhere = old.Append(CutAt(primary, old, primary.LocalDurableUntil) with { Cut = cut, From = cut }); // the sum of other bytes

            Assert.Equal(ShipmentOutcome.Diverged, wrongSum.Outcome);
            Assert.Equal(ShipmentOutcome.Diverged, elsewhere.Outcome);
            Assert.Equal(oldEnd, wrongSum.DurableUntil);
            Assert.Equal(oldEnd, old.DurableUntil);
            Assert.Equal(0, old.Cuts);
            Assert.Equal(before, Bytes(oldDir.Path, old.Begin, oldEnd));
            Assert.False(File.Exists(Path.Combine(oldDir.Path, ReplicaLog.CutMarkerFileName)));

            // A cut at the replica's begin compares nothing: refused too.
            Assert.Equal(ShipmentOutcome.Diverged, old.Append(new Shipment(2, old.Begin, old.Begin, 0, false, ReadOnlyMemory<byte>.Empty, Cut: old.Begin, CutSum: 0)).Outcome);
            Assert.Equal(oldEnd, old.DurableUntil);
        }
    }
}
