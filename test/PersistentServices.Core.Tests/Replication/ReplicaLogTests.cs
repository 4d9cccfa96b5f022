using Google.Protobuf;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.Checkpoints;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Replication;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Replication;

/// <summary>
/// A replica's copy of a primary's log (docs/replication.md): the primary's committed bytes, shipped as they are on disk
/// and written at their own addresses, make a directory that opens as the same log, with every record at its own LSN.
/// </summary>
public sealed class ReplicaLogTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static Payload MakePayload(uint tag, int size)
    {
        var bytes = new byte[size];
        new Random((int)tag + 7).NextBytes(bytes);
        return new Payload { Tag = tag, Data = ByteString.CopyFrom(bytes) };
    }

    private static async Task<List<(long Lsn, Payload Payload)>> AppendAsync(DurableLog log, int count, uint firstTag, int maxSize = 2500, int perCommit = 7)
    {
        var written = new List<(long, Payload)>();
        var random = new Random((int)firstTag);
        for (var i = 0; i < count; i++)
        {
            var payload = MakePayload(firstTag + (uint)i, random.Next(0, maxSize));
            var lsn = log.Append(RecordKind.Payload, payload);
            written.Add((lsn, payload));
            if (i % perCommit == perCommit - 1 || i == count - 1)
            {
                await log.WaitUntilDurableAsync(lsn, Ct);
            }
        }

        return written;
    }

    /// <summary>Ships the primary's durable bytes after the replica's end, in pieces of at most <paramref name="chunk"/> bytes ending at commit ends.</summary>
    private static ShipmentResult Ship(DurableLog primary, ReplicaLog replica, long term = 1, long anchor = 0)
    {
        using var reader = new CommittedLogReader(primary.Directory, primary.SegmentSizeBits);
        var until = primary.LocalDurableUntil;
        var reset = replica.IsEmpty || replica.DurableUntil < primary.BeginAddress;
        var from = reset ? primary.BeginAddress : replica.DurableUntil;
        var bytes = new byte[until - from];
        Assert.True(reader.TryRead(from, bytes));
        return replica.Append(new Shipment(term, from, primary.BeginAddress, anchor, reset, bytes));
    }

    private static async Task<List<(long Lsn, Payload Payload)>> ReadAllAsync(DurableLog log)
    {
        var records = new List<(long, Payload)>();
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            if (record.Kind == RecordKind.Payload)
            {
                records.Add((record.Lsn, record.Parse(Payload.Parser)));
            }
        }

        return records;
    }

    [Fact]
    public async Task ShippedInPieces_AcrossPagesAndSegments_TheReplicaOpensAsTheSameLog()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        var written = new List<(long Lsn, Payload Payload)>();
        await using (var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct))
        {
            using var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance);
            Assert.True(replica.IsEmpty);
            for (uint round = 0; round < 12; round++)
            {
                written.AddRange(await AppendAsync(primary, 60, round * 1000));
                var result = Ship(primary, replica);
                Assert.Equal(ShipmentOutcome.Appended, result.Outcome);
                Assert.Equal(primary.LocalDurableUntil, result.DurableUntil);
            }

            Assert.True(SegmentFiles.List(replicaDir.Path).Count > 3, "the test crosses several segments");
        }

        // The replica's directory is a log: verification passes and every record is at its own LSN.
        await using var promoted = await DurableLog.OpenAsync(LogTestOptions.Small(replicaDir.Path), cancellationToken: Ct);
        Assert.Equal(written, await ReadAllAsync(promoted));

        // And it goes on as a log of its own.
        var more = await AppendAsync(promoted, 5, 90000);
        Assert.Equal([.. written, .. more], await ReadAllAsync(promoted));
    }

    [Fact]
    public async Task Reopened_TheReplicaKeepsItsEndTermAndAnchor_AndRefusesAnOlderTerm()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        await using var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct);
        var written = await AppendAsync(primary, 40, 1);
        long end;
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica, term: 3, anchor: written[10].Lsn).Outcome);
            end = replica.DurableUntil;
        }

        Assert.Equal(written[10].Lsn, AnchorFile.Read(replicaDir.Path));
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Assert.Equal(3, replica.Term);
            Assert.Equal(end, replica.DurableUntil);

            // A shipment of an older term (an old primary) is refused, and changes nothing.
            var stale = replica.Append(new Shipment(2, end, primary.BeginAddress, 0, false, new byte[] { 1, 2, 3 }));
            Assert.Equal(ShipmentOutcome.Fenced, stale.Outcome);
            Assert.Equal(3, stale.Term);

            // A shipment that does not start at the replica's end is refused with where it ends and its tail's checksum.
            var misplaced = replica.Append(new Shipment(3, end - 100, primary.BeginAddress, 0, false, new byte[100]));
            Assert.Equal(ShipmentOutcome.Position, misplaced.Outcome);
            Assert.Equal(end, misplaced.DurableUntil);
            var tail = new byte[end - ReplicaLog.TailChecksumFrom(misplaced.Begin, end)];
            using var reader = new CommittedLogReader(primary.Directory, primary.SegmentSizeBits);
            Assert.True(reader.TryRead(end - tail.Length, tail));
            Assert.Equal(Crc32C.Compute(tail), misplaced.TailChecksum);
            Assert.Equal(end, replica.DurableUntil);
        }
    }

    [Fact]
    public async Task PrimaryTruncates_TheReplicaDropsTheSameSegments_AndStillOpens()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        List<(long Lsn, Payload Payload)> kept;
        await using (var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct))
        {
            using var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance);
            var written = await AppendAsync(primary, 300, 1);
            Ship(primary, replica);
            var cut = written[200].Lsn;
            await primary.TruncateUntilAsync(cut, Ct);
            kept = [.. written.Skip(200), .. await AppendAsync(primary, 20, 5000)];
            var result = Ship(primary, replica, anchor: cut);
            Assert.Equal(ShipmentOutcome.Appended, result.Outcome);
            Assert.Equal(cut, replica.Begin);
            Assert.Equal(SegmentFiles.List(primaryDir.Path).Keys, SegmentFiles.List(replicaDir.Path).Keys);
        }

        await using var promoted = await DurableLog.OpenAsync(LogTestOptions.Small(replicaDir.Path), cancellationToken: Ct);
        Assert.Equal(kept[0].Lsn, promoted.BeginAddress);
        Assert.Equal(kept, await ReadAllAsync(promoted));
    }

    [Fact]
    public async Task PrimaryTruncates_TheReplicaKeepsItsSegments_UntilItAnchorsTheCheckpointTheShipmentNames()
    {
        // Issue 51's nemesis: a replica anchored an older checkpoint (here at record 250; its recovery may start much earlier),
        // and the primary, with a newer checkpoint the replica does not hold yet, truncated to record 200. The replica dropped
        // its segments before 200 because its anchor lay after 200, and once promoted refused to start: "records recovery
        // needs are gone". It keeps them until it anchors the checkpoint the shipment names.
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        await using var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct);
        using var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance);
        var written = await AppendAsync(primary, 300, 1);
        Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica, anchor: written[250].Lsn).Outcome);
        Assert.Equal(written[250].Lsn, replica.Anchor);
        var begin = replica.Begin;

        var cut = written[200].Lsn;
        await primary.TruncateUntilAsync(cut, Ct);
        var newer = await AppendAsync(primary, 20, 5000);
        var notHeldYet = primary.LocalDurableUntil + 4096; // the primary's newer checkpoint, past what this shipment carries
        Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica, anchor: notHeldYet).Outcome);
        Assert.Equal(begin, replica.Begin);
        Assert.Equal(written[250].Lsn, replica.Anchor);

        // Once it holds and anchors that checkpoint (here a record it holds), it drops the same segments as the primary.
        await AppendAsync(primary, 5, 9000);
        Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica, anchor: newer[10].Lsn).Outcome);
        Assert.Equal(newer[10].Lsn, replica.Anchor);
        Assert.Equal(cut, replica.Begin);
        Assert.Equal(SegmentFiles.List(primaryDir.Path).Keys, SegmentFiles.List(replicaDir.Path).Keys);
    }

    [Fact]
    public async Task ReplicaBehindTheBegin_IsReset_AndHoldsThePrimarysLogFromItsBegin()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        List<(long Lsn, Payload Payload)> kept;
        await using (var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct))
        {
            using var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance);
            var written = await AppendAsync(primary, 50, 1);
            Ship(primary, replica);

            // The replica is away while the primary writes and truncates past its end: only the total path remains.
            written.AddRange(await AppendAsync(primary, 300, 100));
            await primary.TruncateUntilAsync(written[250].Lsn, Ct);
            kept = [.. written.Skip(250)];
            Assert.True(replica.DurableUntil < primary.BeginAddress);
            var result = Ship(primary, replica);
            Assert.Equal(ShipmentOutcome.Appended, result.Outcome);
            Assert.Equal(primary.BeginAddress, replica.Begin);
            Assert.False(File.Exists(Path.Combine(replicaDir.Path, ReplicaLog.ResetMarkerFileName)));
        }

        await using var promoted = await DurableLog.OpenAsync(LogTestOptions.Small(replicaDir.Path), cancellationToken: Ct);
        Assert.Equal(kept, await ReadAllAsync(promoted));
    }

    [Fact]
    public async Task AResetCutShortByACrash_IsFinishedByTheNextOpen()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        await using var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct);
        await AppendAsync(primary, 80, 1);
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Ship(primary, replica);
        }

        // What a crash in the middle of a reset leaves: the marker, and files half deleted (here: the metadata gone first).
        File.WriteAllText(Path.Combine(replicaDir.Path, ReplicaLog.ResetMarkerFileName), "reset");
        File.Delete(Path.Combine(replicaDir.Path, CommitMetadataFile.FileName));
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Assert.True(replica.IsEmpty);
            Assert.Empty(SegmentFiles.List(replicaDir.Path));
            Assert.Equal(ShipmentOutcome.Empty, replica.Append(new Shipment(1, 64, 64, 0, false, ReadOnlyMemory<byte>.Empty)).Outcome);
            Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica).Outcome);
        }
    }

    [Fact]
    public async Task ATornWriteAfterTheReplicasEnd_IsCutAtTheNextOpen()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        await using var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct);
        var written = await AppendAsync(primary, 30, 1);
        long end;
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Ship(primary, replica);
            end = replica.DurableUntil;
        }

        // A crash (of the machine) in the middle of the next shipment's write: some of its sectors are on disk, cut inside a
        // record, and nothing of it was acknowledged.
        var more = await AppendAsync(primary, 10, 500);
        var bytes = new byte[SegmentFiles.CeilSector(end + (primary.LocalDurableUntil - end) / 2) - end];
        using (var reader = new CommittedLogReader(primary.Directory, primary.SegmentSizeBits))
        {
            Assert.True(reader.TryRead(end, bytes));
        }

        bytes.AsSpan(bytes.Length - 200).Clear();

        var segmentBits = LogTestOptions.Small(replicaDir.Path).SegmentSizeBits;
        var segment = SegmentFiles.PathOf(SegmentFiles.BasePath(replicaDir.Path), (int)(end >> segmentBits));
        using (var file = new FileStream(segment, FileMode.Open, FileAccess.Write))
        {
            var offset = end & ((1L << segmentBits) - 1);
            var inSegment = (int)Math.Min(bytes.Length, (1L << segmentBits) - offset);
            file.Position = offset;
            file.Write(bytes, 0, inSegment);
        }

        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Assert.Equal(end, replica.DurableUntil);
            Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica).Outcome);
        }

        await primary.DisposeAsync();
        await using var promoted = await DurableLog.OpenAsync(LogTestOptions.Small(replicaDir.Path), cancellationToken: Ct);
        Assert.Equal([.. written, .. more], await ReadAllAsync(promoted));
    }

    [Fact]
    public async Task WithReplicationRequired_NothingIsDurableUntilAReplicaReportsIt_AndAFenceFaultsTheLog()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var watermark = new ReplicationWatermark(replicas: 2, required: 1);
        var shipped = 0L;
        watermark.LocalAdvanced += () => shipped = watermark.LocalUntil;
        log.RequireReplication(watermark);

        var lsn = log.Append(RecordKind.Payload, MakePayload(1, 100));
        var durable = log.WaitUntilDurableAsync(lsn, Ct).AsTask();
        await log.WaitUntilLocallyDurableAsync(lsn, Ct);
        Assert.True(lsn < log.LocalDurableUntil);
        Assert.Equal(log.LocalDurableUntil, shipped);
        await Task.Delay(50, Ct);
        Assert.False(durable.IsCompleted, "locally durable is not durable while no replica holds it");
        Assert.True(lsn >= log.DurableUntil);

        watermark.Report(1, lsn + 1);
        await durable.WaitAsync(TimeSpan.FromSeconds(10), Ct);
        Assert.True(lsn < log.DurableUntil);

        // A newer primary: every wait fails, and the log refuses appends as a faulted log does.
        var next = log.Append(RecordKind.Payload, MakePayload(2, 100));
        var waiting = log.WaitUntilDurableAsync(next, Ct).AsTask();
        watermark.Fence(new LogFaultedException("fenced by term 2"));
        await Assert.ThrowsAsync<LogFaultedException>(() => waiting.WaitAsync(TimeSpan.FromSeconds(10), Ct));
        Assert.NotNull(log.Fault);
        Assert.Throws<LogFaultedException>(() => log.Append(RecordKind.Payload, MakePayload(3, 10)));
    }

    [Fact]
    public void Watermark_IsWhatTheRequiredNumberOfReplicasHold()
    {
        var watermark = new ReplicationWatermark(replicas: 3, required: 2);
        watermark.Report(0, 500);
        Assert.Equal(0, watermark.Until);
        watermark.Report(2, 300);
        Assert.Equal(300, watermark.Until);
        watermark.Report(1, 900);
        Assert.Equal(500, watermark.Until);
        watermark.Report(0, 200); // never backwards
        Assert.Equal(500, watermark.Until);
        Assert.Equal(long.MaxValue, new ReplicationWatermark(replicas: 1, required: 0).Until);
    }

    private static Shipment Claim(long term, Guid candidate) => new(term, -1, 0, 0, false, ReadOnlyMemory<byte>.Empty, candidate);

    [Fact]
    public void AClaimOfANewerTerm_IsGrantedDurably_ItsCandidateAgainIsGranted_AnotherCandidateIsDenied()
    {
        using var replicaDir = new TempDirectory();
        var a = Guid.NewGuid();
        var b = Guid.NewGuid();
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            var granted = replica.Append(Claim(2, a));
            Assert.Equal(ShipmentOutcome.Empty, granted.Outcome); // an answer in the claimed term: the candidate counts it
            Assert.Equal(2, granted.Term);
            Assert.Equal(a, replica.VotedFor);
        }

        Assert.Equal(a, TermFile.Read(replicaDir.Path)!.Value.VotedFor);
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            // After a restart the vote holds: the same candidate's claim is granted again, another's is denied.
            Assert.Equal(a, replica.VotedFor);
            Assert.Equal(ShipmentOutcome.Empty, replica.Append(Claim(2, a)).Outcome);
            var denied = replica.Append(Claim(2, b));
            Assert.Equal(ShipmentOutcome.Denied, denied.Outcome);
            Assert.Equal(2, denied.Term);
            Assert.Equal(a, replica.VotedFor);

            // An older term's claim is fenced; a newer term's is granted to its candidate, whoever had this one.
            Assert.Equal(ShipmentOutcome.Fenced, replica.Append(Claim(1, b)).Outcome);
            Assert.Equal(ShipmentOutcome.Empty, replica.Append(Claim(3, b)).Outcome);
            Assert.Equal((3L, b), (replica.Term, replica.VotedFor));
            Assert.Equal(ShipmentOutcome.Denied, replica.Append(Claim(3, a)).Outcome);
        }
    }

    [Fact]
    public void ACandidatesOwnTerm_IsItsVoteForItself_AnotherCandidatesClaimIsDenied()
    {
        using var replicaDir = new TempDirectory();
        var self = Guid.NewGuid();
        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Assert.True(replica.TryAdvanceTerm(2, self));
            Assert.Equal(self, replica.VotedFor);
            Assert.Equal(ShipmentOutcome.Denied, replica.Append(Claim(2, Guid.NewGuid())).Outcome);
            Assert.False(replica.TryAdvanceTerm(2, Guid.NewGuid())); // a term is claimed once
        }

        using (var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance))
        {
            Assert.Equal(self, replica.VotedFor);
            Assert.Equal(ShipmentOutcome.Denied, replica.Append(Claim(2, Guid.NewGuid())).Outcome);
        }
    }

    [Fact]
    public async Task ATermTakenFromAPrimarysShipment_RecordsNoVote_EveryClaimOfItIsDenied_ThePrimarysProbesAreNot()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        await using var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct);
        await AppendAsync(primary, 20, 1);
        using var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance);

        // The primary's probe of where the replica stands (no candidate) takes its term, as a shipment does: no vote.
        Assert.Equal(ShipmentOutcome.Empty, replica.Append(new Shipment(2, -1, primary.BeginAddress, 0, false, ReadOnlyMemory<byte>.Empty)).Outcome);
        Assert.Equal((2L, Guid.Empty), (replica.Term, replica.VotedFor));
        Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica, term: 2).Outcome);

        // Term 2 has its primary: a candidate's claim of it is denied (it could only make a second primary of the term).
        var denied = replica.Append(Claim(2, Guid.NewGuid()));
        Assert.Equal(ShipmentOutcome.Denied, denied.Outcome);
        Assert.Equal(replica.DurableUntil, denied.DurableUntil);

        // The primary's own probes and shipments go on.
        Assert.Equal(ShipmentOutcome.Position, replica.Append(new Shipment(2, -1, primary.BeginAddress, 0, false, ReadOnlyMemory<byte>.Empty)).Outcome);
        await AppendAsync(primary, 5, 100);
        Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica, term: 2).Outcome);
        Assert.Equal(Guid.Empty, TermFile.Read(replicaDir.Path)!.Value.VotedFor);
    }

    [Fact]
    public async Task ThePrimarysShipments_OfATermThisReplicaGrantedToAnotherCandidate_AreAccepted_AndKeepTheVote()
    {
        using var primaryDir = new TempDirectory();
        using var replicaDir = new TempDirectory();
        await using var primary = await DurableLog.OpenAsync(LogTestOptions.Small(primaryDir.Path), cancellationToken: Ct);
        await AppendAsync(primary, 20, 1);
        using var replica = ReplicaLog.Open(LogTestOptions.Small(replicaDir.Path), NullLogger.Instance);
        Assert.Equal(ShipmentOutcome.Appended, Ship(primary, replica, term: 1).Outcome);
        var voted = Guid.NewGuid();
        Assert.Equal(ShipmentOutcome.Position, replica.Append(Claim(2, voted)).Outcome);

        // Whichever candidate became the primary of term 2 (at most one did), its shipments are no vote: they are taken.
        await AppendAsync(primary, 5, 100);
        var result = Ship(primary, replica, term: 2);

        Assert.Equal(ShipmentOutcome.Appended, result.Outcome);
        Assert.Equal(primary.LocalDurableUntil, replica.DurableUntil);
        Assert.Equal((2L, 2L, voted), (replica.Term, replica.ContentTerm, replica.VotedFor));
        Assert.Equal(new TermRecord(2, false, 2, voted), TermFile.Read(replicaDir.Path));
    }
}
