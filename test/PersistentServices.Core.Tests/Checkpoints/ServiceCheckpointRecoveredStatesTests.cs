using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.Checkpoints;
using PersistentServices.Domain;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Checkpoints;

/// <summary>
/// A service checkpoint of a domain member lists the recovered state numbers it knows ([MSP §3.4]): truncating the log
/// below its scan start forgets none of them. Until issue 49 they lived only in their RecoveredState records, and a
/// restart after truncation forgot them: a member then answered a flush of its own lost epoch "durable", and kept every
/// DV entry of a member's earlier epochs for ever (a DV grew past its bound).
/// </summary>
public sealed class ServiceCheckpointRecoveredStatesTests : IAsyncLifetime
{
    private readonly TempDirectory _dir = new();
    private DurableLog _log = null!;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public async ValueTask InitializeAsync() => _log = await DurableLog.OpenAsync(LogTestOptions.Small(_dir.Path), cancellationToken: Ct);

    public async ValueTask DisposeAsync()
    {
        await _log.DisposeAsync();
        _dir.Dispose();
    }

    private long LogRecovered(RecoveredStateNumber n)
        => _log.Append(RecordKind.RecoveredState, new RecoveredState { Service = n.Service, Epoch = n.State.Epoch, Lsn = n.State.Lsn });

    [Fact]
    public async Task RecoveredStateNumbers_BelowTheScanStart_SurviveTruncationAndARestart()
    {
        var known = new RecoveredStates();
        var own = new RecoveredStateNumber("A", new StateId(1, 751));
        var member = new RecoveredStateNumber("C", new StateId(18, 4096));
        var recordOfOwn = known.LearnAndLog(own, LogRecovered);
        var recordOfMember = known.LearnAndLog(member, LogRecovered);
        Assert.Equal(0, known.LearnAndLog(own, LogRecovered)); // known: not logged again
        for (var i = 0; i < 50; i++)
        {
            _log.Append(RecordKind.EpochStarted, new EpochStarted { Epoch = 2, Service = "A" });
        }

        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        var store = new SharedStateStore(_log, "A", checkpointInterval: 3) { Epoch = 2 };
        using (var checkpointer = new ServiceCheckpointer(_log, _dir.Path, new SessionTable(), store, idleAfter: 2, NullLogger.Instance) { Epoch = 2, Recovered = known })
        {
            var taken = await checkpointer.TakeAsync(cleanShutdown: false, Ct);
            Assert.True(taken.TruncatedUntil > recordOfMember && recordOfMember > recordOfOwn, $"truncated until {taken.TruncatedUntil}, records at {recordOfOwn} and {recordOfMember}");
        }

        // A number learned after the checkpoint is logged above its scan start: the next recovery meets its record.
        var later = new RecoveredStateNumber("B", new StateId(4, 128));
        known.LearnAndLog(later, LogRecovered);
        await _log.WaitUntilDurableAsync(_log.TailAddress - 1, Ct);
        await _log.DisposeAsync();

        _log = await DurableLog.OpenAsync(LogTestOptions.Small(_dir.Path), cancellationToken: Ct);
        Assert.True(_log.BeginAddress > recordOfMember);
        var relearned = new RecoveredStates();
        await AnalysisScan.RunAsync(_log, _dir.Path, new SessionTable(), new SharedStateStore(_log, "A", checkpointInterval: 3), Ct, recovered: relearned);

        Assert.Equal(751, relearned.RecoveredLsn("A", 1));
        Assert.Equal(4096, relearned.RecoveredLsn("C", 18));
        Assert.Equal(128, relearned.RecoveredLsn("B", 4));
    }

    [Fact]
    public async Task ACheckpointWithoutDomain_ListsNoRecoveredStateNumbers()
    {
        var store = new SharedStateStore(_log, "A", checkpointInterval: 3) { Epoch = 1 };
        using var checkpointer = new ServiceCheckpointer(_log, _dir.Path, new SessionTable(), store, idleAfter: 2, NullLogger.Instance) { Epoch = 1 };
        var taken = await checkpointer.TakeAsync(cleanShutdown: false, Ct);

        var record = await _log.ReadAsync(taken.Lsn, Ct);
        Assert.Empty(record.Parse(ServiceCheckpoint.Parser).Recovered);
    }
}
