using System.Collections.Immutable;
using PersistentServices.Domain;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Nondeterminism;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.SharedState;

/// <summary>Shared variables with value logging ([MSP §3.3, Fig. 8–9]; §4.2–4.3) against a real log.</summary>
[Collection(nameof(SharedStateTestGroup))]
public sealed class SharedStateStoreTests : IAsyncLifetime
{
    private const string Service = "svc";
    private static readonly SharedVariable<int> Counter = new("Tests.Counter");
    private static readonly SharedVariable<ImmutableList<string>?> Names = new("Tests.Names");
    private static readonly SharedMap<string, int> Stock = new("Tests.Stock");

    private readonly TempDirectory _dir = new();
    private DurableLog _log = null!;
    private SharedStateStore _store = null!;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public async ValueTask InitializeAsync()
    {
        _log = await DurableLog.OpenAsync(LogTestOptions.Small(_dir.Path), cancellationToken: Ct);
        _store = new SharedStateStore(_log, Service, checkpointInterval: 3) { Epoch = 1 };
    }

    public async ValueTask DisposeAsync()
    {
        await _log.DisposeAsync();
        _dir.Dispose();
    }

    private static Session NewSession() => new(SessionId.NewRandom(), [], DateTimeOffset.UnixEpoch, replaying: false);

    /// <summary>Runs <paramref name="body"/> as request <paramref name="sequence"/> of <paramref name="session"/> (live, or replayed through <paramref name="cursor"/>).</summary>
    private RequestExecution Run(Session session, long sequence, Action body, ReplayCursor? cursor = null, DurableLog? log = null)
    {
        log ??= _log;
        var requestLsn = log.Append(RecordKind.Payload, new Payload { Tag = (uint)sequence });
        var position = new LoggedPosition(requestLsn, sequence);
        session.PositionStream.Add(position);
        var execution = new RequestExecution(log, Service, 1, session, position, cursor);
        execution.Advance(requestLsn);
        using (SharedStateStore.Enter(_store))
        using (PersistentScope.Enter(new PersistentScope(session, cursor is null ? ExecutionMode.Live : ExecutionMode.Replay, execution)))
        {
            body();
        }

        return execution;
    }

    /// <summary>Runs <paramref name="read"/> in a request of the service that is not a persistent one (the store entered, no execution): a plain read.</summary>
    private T Plain<T>(Func<T> read)
    {
        using (SharedStateStore.Enter(_store))
        {
            return read();
        }
    }

    /// <summary>A fresh store; the counter written 1, 2 and 3 by writers that depend on peer service B at LSNs 100, 200 and 300 of its epoch 1.</summary>
    private async Task WriteOneTwoThreeDependingOnBAsync(int checkpointInterval)
    {
        _store = new SharedStateStore(_log, Service, checkpointInterval) { Epoch = 1 };
        foreach (var (peerLsn, value) in new[] { (100L, 1), (200L, 2), (300L, 3) })
        {
            var writer = NewSession();
            writer.Dv = writer.Dv.With("B", new StateId(1, peerLsn));
            Run(writer, 1, () => Counter.Write(value));
        }

        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
    }

    private async Task<List<LogRecord>> RecordsAsync(RecordKind kind)
    {
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var records = new List<LogRecord>();
        await foreach (var record in _log.ScanAsync(_log.BeginAddress, cancellationToken: Ct))
        {
            if (record.Kind == kind)
            {
                records.Add(record);
            }
        }

        return records;
    }

    [Fact]
    public async Task Write_LogsValueWriterDvAndPreviousWrite_ReplacesTheVariablesDv()
    {
        var writer = NewSession();

        Run(writer, 1, () => Counter.Write(5));
        Run(writer, 2, () => Counter.Write(6));

        var writes = (await RecordsAsync(RecordKind.SharedWrite)).Select(r => (r.Lsn, Write: r.Parse(SharedWrite.Parser))).ToList();
        Assert.Equal(2, writes.Count);
        Assert.Equal("Tests.Counter", writes[0].Write.Variable);
        Assert.Equal("5", writes[0].Write.Value.ToStringUtf8());
        Assert.Equal(0, writes[0].Write.PreviousWriteLsn);
        Assert.Equal(writes[0].Lsn, writes[1].Write.PreviousWriteLsn);
        Assert.Equal(writer.Id.ToBytes(), writes[1].Write.SessionId.ToByteArray());
        var cell = _store.Cell("Tests.Counter");
        Assert.Equal(writes[1].Lsn, cell.StateNumber);
        Assert.Equal(new StateId(1, writes[1].Lsn), cell.Dv[Service]);
    }

    [Fact]
    public async Task Read_LogsTheValueAndTheVariablesDv_MergesItIntoTheReader()
    {
        var writer = NewSession();
        var reader = NewSession();
        writer.Dv = writer.Dv.With("peer", new StateId(4, 900));
        Run(writer, 1, () => Counter.Write(41));

        var seen = 0;
        Run(reader, 1, () => seen = Counter.Read());

        Assert.Equal(41, seen);
        var read = Assert.Single(await RecordsAsync(RecordKind.SharedRead));
        var body = read.Parse(SharedRead.Parser);
        Assert.Equal("41", body.Value.ToStringUtf8());
        Assert.Equal(new StateId(4, 900), DependencyVector.FromRecord(body.Dv)["peer"]);
        Assert.Equal(new StateId(4, 900), reader.Dv["peer"]);
        Assert.Equal(read.Lsn, reader.StateNumber);
        Assert.Equal(_store.Cell("Tests.Counter").ChainHead, body.WriteLsn);
    }

    [Fact]
    public async Task Write_AValueLargerThanARecord_IsRefusedNamingTheVariable_AndNothingIsLoggedOrChanged()
    {
        var writer = NewSession();
        Run(writer, 1, () => Names.Write(["small"]));
        var tail = _log.TailAddress;

        // The small test log's records hold at most 4096 bytes.
        var ex = Assert.Throws<InvalidOperationException>(() => Run(writer, 2, () => Names.Write([new string('x', 5000)])));

        Assert.Contains("Shared variable 'Tests.Names'", ex.Message, StringComparison.Ordinal);
        Assert.Contains("MaxRequestBodyBytes", ex.Message, StringComparison.Ordinal);
        Assert.Single(await RecordsAsync(RecordKind.SharedWrite));
        Run(NewSession(), 1, () => Assert.Equal(["small"], Names.Read()!));
        Assert.True(_log.TailAddress > tail); // only the request records and that read
    }

    [Fact]
    public void WriteOutsideAPersistentRequest_Throws_ReadIsPlain()
    {
        Assert.Throws<InvalidOperationException>(() => Plain(() => { Counter.Write(1); return 0; }));
        Assert.Equal(0, Plain(() => Counter.Read()));
    }

    [Fact]
    public void Handle_OutsideAnyRequestOfAService_ThrowsAndSaysWhy()
    {
        Assert.Null(SharedStateStore.Current);

        var read = Assert.Throws<InvalidOperationException>(() => Counter.Read());
        var write = Assert.Throws<InvalidOperationException>(() => Stock.Set("book", 1));

        Assert.Contains("'Tests.Counter' is used outside a request of a persistent service", read.Message, StringComparison.Ordinal);
        Assert.Contains("'Tests.Stock' is used outside a request", write.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Enter_TwoStoresInOneProcess_EachFlowSeesItsOwnVariables()
    {
        await using var otherLog = await DurableLog.OpenAsync(LogTestOptions.Small(Path.Combine(_dir.Path, "other")), cancellationToken: Ct);
        var other = new SharedStateStore(otherLog, "Other", checkpointInterval: 3) { Epoch = 1 };
        Run(NewSession(), 1, () => Counter.Write(1));
        var mine = _store;
        _store = other;
        Run(NewSession(), 1, () => Counter.Write(2), log: otherLog);
        _store = mine;

        var seen = await Task.WhenAll(
            Task.Run(() => { using (SharedStateStore.Enter(mine)) { return Counter.Read(); } }, Ct),
            Task.Run(() => { using (SharedStateStore.Enter(other)) { return Counter.Read(); } }, Ct));

        Assert.Equal([1, 2], seen);
        Assert.Equal(1, Plain(() => Counter.Read()));
        Assert.Null(SharedStateStore.Current); // every scope restored what was there before
    }

    [Fact]
    public async Task EveryNWrites_ACheckpointIsLogged_AndTheChainBreaksThere()
    {
        var writer = NewSession();
        for (var i = 1; i <= 3; i++)
        {
            Run(writer, i, () => Counter.Write(i * 10));
        }

        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        for (var spin = 0; spin < 200 && _store.Checkpoints == 0; spin++)
        {
            await Task.Delay(10, Ct);
        }

        Run(writer, 4, () => Counter.Write(40));

        var checkpoint = Assert.Single(await RecordsAsync(RecordKind.SharedCheckpoint));
        Assert.Equal("30", checkpoint.Parse(SharedCheckpoint.Parser).Value.ToStringUtf8());
        var last = (await RecordsAsync(RecordKind.SharedWrite)).Last().Parse(SharedWrite.Parser);
        Assert.Equal(checkpoint.Lsn, last.PreviousWriteLsn);
    }

    [Fact]
    public async Task Checkpoints_OfAVariableUpdatedWithoutPause_AreTakenWhileTheUpdatesRun()
    {
        // A hot counter (every request updates it): its checkpoints must not wait for a moment without writes, or its
        // recovery start, and with it the log's truncation point, stays where it was for as long as the load lasts.
        const int cap = 100_000;
        var updates = await Task.Run(() =>
        {
            var done = 0;
            var session = NewSession();
            while (_store.Checkpoints < 5 && done < cap)
            {
                done++;
                Run(session, done, () => Counter.Update(c => c + 1));
            }

            return done;
        }, Ct);

        Assert.True(updates < cap, $"{_store.Checkpoints} checkpoints in {updates} updates");
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var checkpoints = await RecordsAsync(RecordKind.SharedCheckpoint);
        Assert.True(checkpoints.Count >= 5);
        Assert.Equal(_store.Cell("Tests.Counter").RecoveryLsn, checkpoints[^1].Lsn);
    }

    [Fact]
    public async Task AnalysisScan_RollsEveryVariableForwardToItsLatestLoggedValue()
    {
        var writer = NewSession();
        Run(writer, 1, () => Counter.Write(1));
        Run(writer, 2, () => Names.Write(["ada"]));
        Run(writer, 3, () => Stock.Set("book", 7));
        Run(writer, 4, () => Counter.Write(2));
        Run(writer, 5, () => Names.Write(["ada", "grace"]));
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        await _log.DisposeAsync();

        _log = await DurableLog.OpenAsync(LogTestOptions.Small(_dir.Path), cancellationToken: Ct);
        _store = new SharedStateStore(_log, Service, checkpointInterval: 3);
        var result = await AnalysisScan.RunAsync(_log, _dir.Path, new SessionTable(), _store, Ct);

        Assert.Equal(3, result.SharedVariables);
        Assert.Equal(2, Plain(() => Counter.Read()));
        Assert.Equal(["ada", "grace"], Plain(() => Names.Read())!);
        Assert.Equal(7, Plain(() => Stock.Get("book")));
        Assert.Equal(0, Plain(() => Stock.Get("pen")));
    }

    [Fact]
    public async Task OrphanUndo_AlsoSkipsWritesThatAnEarlierLearnedCrashMadeOrphans()
    {
        // Writes 1 and 2 depend on B (LSNs 100, 200 of its epoch 1); write 3 on C only (its writer saw no B state). B's
        // crash (recovered to 150) was learned while write 3 was the latest: the variable was no orphan of it then. When
        // C's crash takes write 3 back, the rollback must not stop at write 2, an orphan of B's crash.
        _store = new SharedStateStore(_log, Service, checkpointInterval: 100) { Epoch = 1 };
        foreach (var (peer, peerLsn, value) in new[] { ("B", 100L, 1), ("B", 200L, 2), ("C", 50L, 3) })
        {
            var writer = NewSession();
            writer.Dv = writer.Dv.With(peer, new StateId(1, peerLsn));
            Run(writer, 1, () => Counter.Write(value));
        }

        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var known = new RecoveredStates();
        var bLost = new RecoveredStateNumber("B", new StateId(1, 150));
        known.Learn(bLost);
        Assert.False(await _store.RollBackOrphanAsync("Tests.Counter", bLost, known, Ct));

        var cLost = new RecoveredStateNumber("C", new StateId(1, 10));
        known.Learn(cLost);
        Assert.True(await _store.RollBackOrphanAsync("Tests.Counter", cLost, known, Ct));

        Assert.Equal(1, Plain(() => Counter.Read()));
        Assert.Null(known.FindOrphan(_store.Cell("Tests.Counter").Dv));
    }

    /// <summary>
    /// Issue 38 (an orphan rollback without end): a recovered state number learned while a request that depends on the lost
    /// state is still running. Its write after the learning's check of the variable would give the variable the lost
    /// dependency for good (every later reader an orphan, rolled back, reading it again). The write is refused (its request
    /// abandoned: it logs nothing more, whatever the endpoint does), and the variable keeps its value and DV.
    /// </summary>
    [Fact]
    public void Write_ByAWriterThatDependsOnKnownLostState_IsRefused_AndTheRequestIsAbandoned()
    {
        var known = new RecoveredStates();
        _store.Recovered = known;
        _store.OrphanError = lost => new InvalidOperationException("orphan of " + lost.Service);
        var clean = NewSession();
        Run(clean, 1, () => Counter.Write(1));

        var writer = NewSession();
        writer.Dv = writer.Dv.With("B", new StateId(1, 300));
        known.Learn(new RecoveredStateNumber("B", new StateId(1, 250)));
        RequestExecution? execution = null;
        var error = Assert.Throws<InvalidOperationException>(() => execution = Run(writer, 1, () => Counter.Write(2)));

        Assert.Equal("orphan of B", error.Message);
        Assert.Equal(1, Plain(() => Counter.Read()));
        Assert.Null(known.FindOrphan(_store.Cell("Tests.Counter").Dv));

        // Whatever the endpoint does after catching it, its request logs nothing more.
        var caught = NewSession();
        caught.Dv = caught.Dv.With("B", new StateId(1, 260));
        var abandoned = Run(caught, 1, () =>
        {
            Assert.Throws<InvalidOperationException>(() => Counter.Write(3));
            Assert.Throws<InvalidOperationException>(() => Stock.Update("x", n => n + 1));
        });
        Assert.NotNull(abandoned.Abandoned);
        Assert.Empty(abandoned.Position.Aux);
        Assert.Equal(1, Plain(() => Counter.Read()));
    }

    /// <summary>
    /// A variable that depends on known lost state (the learning's check missed it, or its rollback has not run): a live read
    /// starts the variable's rollback and is refused, so no reader takes the lost dependency; its next run reads the value
    /// the rollback restored.
    /// </summary>
    [Fact]
    public async Task Read_OfAVariableThatDependsOnKnownLostState_StartsItsRollback_AndIsRefused()
    {
        await WriteOneTwoThreeDependingOnBAsync(checkpointInterval: 100);
        var known = new RecoveredStates();
        _store.Recovered = known;
        _store.OrphanError = lost => new InvalidOperationException("orphan of " + lost.Service);
        known.Learn(new RecoveredStateNumber("B", new StateId(1, 250)));

        var reader = NewSession();
        Assert.Throws<InvalidOperationException>(() => Run(reader, 1, () => Counter.Read()));
        Assert.DoesNotContain(reader.Dv.Entries, e => e.Key == "B");

        var deadline = DateTime.UtcNow.AddSeconds(10);
        while (known.FindOrphan(_store.Cell("Tests.Counter").Dv) is not null)
        {
            Assert.True(DateTime.UtcNow < deadline, "the variable was not rolled back");
            await Task.Delay(10, Ct);
        }

        var again = NewSession();
        var value = 0;
        Run(again, 2, () => value = Counter.Read());
        Assert.Equal(2, value);
    }

    [Fact]
    public async Task OrphanUndo_FollowsTheBackwardChainToTheLatestNonOrphanWrite()
    {
        // Writers that depend on peer service B at LSNs 100, 200 and 300 of its epoch 1; B recovers only up to 250.
        await WriteOneTwoThreeDependingOnBAsync(checkpointInterval: 100);
        var rolledBack = await _store.RollBackOrphanAsync("Tests.Counter", new RecoveredStateNumber("B", new StateId(1, 250)), cancellationToken: Ct);

        Assert.True(rolledBack);
        Assert.Equal(2, Plain(() => Counter.Read()));
        Assert.Equal(new StateId(1, 200), _store.Cell("Tests.Counter").Dv["B"]);
        Assert.False(await _store.RollBackOrphanAsync("Tests.Counter", new RecoveredStateNumber("B", new StateId(1, 250)), cancellationToken: Ct));
        Assert.False(await _store.RollBackOrphanAsync("Tests.Counter", new RecoveredStateNumber("B", new StateId(2, 0)), cancellationToken: Ct));
    }

    [Fact]
    public async Task OrphanUndo_UnderASteadyStreamOfUpdates_FinishesWhileTheyRun_AndLaterUpdatesBuildOnTheRolledBackValue()
    {
        // As above: the value 3 depends on B's lost state, 2 does not. Then updates (each from a session of its own, with
        // no dependency on B) run without pause: those that read the orphan value carry its DV and move the chain's head.
        await WriteOneTwoThreeDependingOnBAsync(checkpointInterval: 1_000_000);
        const int cap = 200_000;
        Task<bool>? rollback = null;
        var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var updater = Task.Run(() =>
        {
            var updates = 0;
            while (!(rollback?.IsCompleted ?? false) && updates < cap)
            {
                Run(NewSession(), 1, () => Counter.Update(c => c + 1000));
                if (++updates == 100)
                {
                    started.SetResult();
                }
            }

            return updates;
        }, Ct);
        await started.Task.WaitAsync(Ct);

        rollback = _store.RollBackOrphanAsync("Tests.Counter", new RecoveredStateNumber("B", new StateId(1, 250)), cancellationToken: Ct);
        var updates = await updater;

        Assert.True(await rollback);
        Assert.True(updates < cap, "the rollback was overtaken by every update until they stopped");
        Assert.Equal(2, Plain(() => Counter.Read()) % 1000);
        Assert.False(_store.Cell("Tests.Counter").Dv.IsOrphan(new RecoveredStateNumber("B", new StateId(1, 250))));
    }

    [Fact]
    public async Task OrphanUndo_StopsAtACheckpoint_WhichIsNeverAnOrphan()
    {
        var writer = NewSession();
        writer.Dv = writer.Dv.With("B", new StateId(1, 10));
        for (var i = 1; i <= 3; i++)
        {
            Run(writer, i, () => Counter.Write(i));
        }

        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        for (var spin = 0; spin < 200 && _store.Checkpoints == 0; spin++)
        {
            await Task.Delay(10, Ct);
        }

        var late = NewSession();
        late.Dv = late.Dv.With("B", new StateId(1, 500));
        Run(late, 1, () => Counter.Write(99));
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);

        Assert.True(await _store.RollBackOrphanAsync("Tests.Counter", new RecoveredStateNumber("B", new StateId(1, 0)), cancellationToken: Ct));
        Assert.Equal(3, Plain(() => Counter.Read()));
    }

    [Fact]
    public async Task Replay_ReadsReturnTheLoggedValue_WritesAreSkipped()
    {
        var session = NewSession();
        var live = Run(session, 1, () =>
        {
            var seen = Counter.Read();
            Counter.Write(seen + 1);
        });

        // Another session moves the variable on; the replay must still see what the request saw.
        Run(NewSession(), 1, () => Counter.Write(100));
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var logged = new List<LogRecord>();
        foreach (var lsn in live.Position.Aux)
        {
            logged.Add(await _log.ReadAsync(lsn, Ct));
        }

        var replayed = NewSession();
        var cursor = new ReplayCursor(logged, allowLiveTail: false, "s", 1, live.Position.RequestLsn);
        int seenInReplay = -1;
        Run(replayed, 1, () =>
        {
            seenInReplay = Counter.Read();
            Counter.Write(seenInReplay + 1);
        }, cursor);
        cursor.EnsureConsumed();

        Assert.Equal(0, seenInReplay);
        Assert.Null(cursor.Divergence);
        Assert.Equal(100, Plain(() => Counter.Read()));
    }

    [Fact]
    public async Task Replay_DoingSomethingElseThanLogged_IsADivergence()
    {
        var session = NewSession();
        var live = Run(session, 1, () => Counter.Read());
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var logged = new List<LogRecord> { await _log.ReadAsync(live.Position.Aux.Single(), Ct) };

        var cursor = new ReplayCursor(logged, allowLiveTail: false, "s", 1, live.Position.RequestLsn);
        Assert.Throws<ReplayDivergenceException>(() => Run(NewSession(), 1, () => Names.Read(), cursor));
        Assert.Contains("Tests.Names", cursor.Divergence, StringComparison.Ordinal);

        var fewer = new ReplayCursor(logged, allowLiveTail: false, "s", 1, live.Position.RequestLsn);
        Run(NewSession(), 1, () => { }, fewer);
        fewer.EnsureConsumed();
        Assert.Contains("did less", fewer.Divergence, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Update_ConcurrentSessions_NoLostUpdates_EveryResultDistinct()
    {
        var results = new System.Collections.Concurrent.ConcurrentBag<int>();
        await Task.WhenAll(Enumerable.Range(0, 8).Select(_ => Task.Run(() =>
        {
            var session = NewSession();
            for (var i = 1; i <= 100; i++)
            {
                Run(session, i, () => results.Add(Counter.Update(c => c + 1)));
            }
        }, Ct)));

        Assert.Equal(800, Plain(() => Counter.Read()));
        Assert.Equal(Enumerable.Range(1, 800), results.Order());
        var writes = await RecordsAsync(RecordKind.SharedWrite);
        Assert.Equal(800, writes.Count);
    }

    [Fact]
    public async Task Update_Replay_ChangesTheLoggedValue_AndSkipsTheWrite()
    {
        var live = Run(NewSession(), 1, () => Stock.Update("book", q => q + 5));
        Run(NewSession(), 1, () => Stock.Set("book", 50));
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var logged = new List<LogRecord>();
        foreach (var lsn in live.Position.Aux)
        {
            logged.Add(await _log.ReadAsync(lsn, Ct));
        }

        var cursor = new ReplayCursor(logged, allowLiveTail: false, "s", 1, live.Position.RequestLsn);
        var replayed = -1;
        Run(NewSession(), 1, () => replayed = Stock.Update("book", q => q + 5), cursor);
        cursor.EnsureConsumed();

        Assert.Equal([RecordKind.SharedRead, RecordKind.SharedWrite], logged.Select(r => r.Kind));
        Assert.Equal(5, replayed);
        Assert.Null(cursor.Divergence);
        Assert.Equal(50, Plain(() => Stock.Get("book")));
    }

    [Fact]
    public async Task AnalysisScan_SessionCrashedInsideAnUpdate_ReservesTheVariableUntilItsReplayEnds()
    {
        // Session A read Tests.Counter for an update (logged) and crashed before its write; session B finished its update.
        var a = SessionId.NewRandom();
        var b = SessionId.NewRandom();
        foreach (var (session, complete) in new[] { (a, false), (b, true) })
        {
            var id = Google.Protobuf.ByteString.CopyFrom(session.ToBytes());
            _log.Append(RecordKind.SessionStarted, new SessionStarted { SessionId = id });
            _log.Append(RecordKind.Request, new LoggedRequest { SessionId = id, Sequence = 1 });
            _log.Append(RecordKind.SharedRead, new SharedRead { Variable = "Tests.Counter", SessionId = id, Sequence = 1, ForUpdate = true, Value = Google.Protobuf.ByteString.CopyFromUtf8("0") });
            if (complete)
            {
                _log.Append(RecordKind.SharedWrite, new SharedWrite { Variable = "Tests.Counter", SessionId = id, Sequence = 1, Value = Google.Protobuf.ByteString.CopyFromUtf8("1") });
            }
        }

        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var sessions = new SessionTable();
        var result = await AnalysisScan.RunAsync(_log, _dir.Path, sessions, _store, Ct);

        Assert.Equal(1, result.Reservations);
        Assert.Equal(a, _store.Cell("Tests.Counter").ReservedFor);
        Assert.True(sessions.TryGet(a, out var holder) && holder.HoldsReservations);
        Assert.True(sessions.TryGet(b, out var other) && !other.HoldsReservations);
        var unreserved = _store.WhenUnreservedAsync();
        Assert.False(unreserved.IsCompleted, "live requests wait while a crashed update holds a variable");

        _store.ReleaseReservations(a);

        await unreserved.WaitAsync(TimeSpan.FromSeconds(5), Ct);
        Assert.Null(_store.Cell("Tests.Counter").ReservedFor);
    }

    [Fact]
    public async Task Nondeterminism_LoggedOnFirstExecution_SameValuesOnReplay()
    {
        var time = new PersistentTimeProvider(TimeProvider.System);
        var random = new PersistentRandom();
        var ids = new PersistentIdGenerator();
        (DateTimeOffset, int, double, Guid) first = default;
        var live = Run(NewSession(), 1, () => first = (time.GetUtcNow(), random.Next(1000), random.NextDouble(), ids.NewGuid()));
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var logged = new List<LogRecord>();
        foreach (var lsn in live.Position.Aux)
        {
            logged.Add(await _log.ReadAsync(lsn, Ct));
        }

        await Task.Delay(20, Ct);
        var cursor = new ReplayCursor(logged, allowLiveTail: false, "s", 1, live.Position.RequestLsn);
        (DateTimeOffset, int, double, Guid) again = default;
        Run(NewSession(), 1, () => again = (time.GetUtcNow(), random.Next(1000), random.NextDouble(), ids.NewGuid()), cursor);

        Assert.Equal(4, logged.Count);
        Assert.Equal(first, again);
        Assert.NotEqual(first.Item1, time.GetUtcNow());
    }
}

[CollectionDefinition(nameof(SharedStateTestGroup), DisableParallelization = true)]
public sealed class SharedStateTestGroup;
