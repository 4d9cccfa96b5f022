using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Recovery;

/// <summary>Session and service checkpoints in process: recovery starts from them, the log is truncated below them.</summary>
public sealed class CheckpointRecoveryTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task Crash_AfterCheckpoints_RecoveryReplaysOnlyWhatFollowedThem_AndTheLogWasTruncated()
    {
        var sessions = new string[4];
        long beginBefore;
        long beginAfter;
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.SessionCheckpointBytes = 2048))
        {
            beginBefore = server.Runtime.Log.BeginAddress;
            for (var s = 0; s < sessions.Length; s++)
            {
                sessions[s] = await server.StartSessionAsync();
            }

            for (var i = 1; i <= 40; i++)
            {
                foreach (var session in sessions)
                {
                    var (response, _) = await server.SendAsync(HttpMethod.Post, "/counter/add", session, i, new { opId = $"{session}-{i}", amount = 1 });
                    Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                }
            }

            var checkpoint = await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            beginAfter = server.Runtime.Log.BeginAddress;
            Assert.True(checkpoint.ScanFrom > beginBefore);
            Assert.Equal(checkpoint.ScanFrom, beginAfter);

            // Two more requests each, after the checkpoint: the ones recovery replays.
            for (var i = 41; i <= 42; i++)
            {
                foreach (var session in sessions)
                {
                    await server.SendAsync(HttpMethod.Post, "/counter/add", session, i, new { opId = $"{session}-{i}", amount = 1 });
                }
            }

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.SessionCheckpointBytes = 2048))
        {
            await server.RecoveryCompletion;
            var analysis = server.Runtime.Analysis!;
            Assert.True(analysis.AnchorLsn > 0);
            Assert.True(analysis.ScannedFrom >= beginAfter);
            Assert.True(analysis.SessionsFromCheckpoints >= sessions.Length);
            Assert.True(analysis.Requests < 40 * sessions.Length / 2, $"replayed {analysis.Requests} requests: the checkpoints were not used");
            foreach (var session in sessions)
            {
                var (_, state) = await server.SendAsync(HttpMethod.Get, "/counter", session, null);
                Assert.Equal(42, state.GetProperty("total").GetInt64());

                // A retry of the last request still gets its reply, and the next request continues the count.
                var (retry, retryBody) = await server.SendAsync(HttpMethod.Post, "/counter/add", session, 42, new { opId = $"{session}-42", amount = 1 });
                Assert.Equal(HttpStatusCode.OK, retry.StatusCode);
                Assert.Equal(42, retryBody.GetProperty("total").GetInt64());
                var (next, nextBody) = await server.SendAsync(HttpMethod.Post, "/counter/add", session, 43, new { opId = $"{session}-43", amount = 1 });
                Assert.Equal(HttpStatusCode.OK, next.StatusCode);
                Assert.Equal(43, nextBody.GetProperty("total").GetInt64());
            }

        }
    }

    [Fact]
    public async Task IdleSession_IsCheckpointedAfterAFewServiceCheckpoints_SoTheLogStartMovesPastIt()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 2);
        var idle = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/counter/add", idle, 1, new { opId = "idle-1", amount = 5 });
        var busy = await server.StartSessionAsync();
        var recoveryLsn = server.Session(idle).RecoveryLsn;

        for (var round = 0; round < 3; round++)
        {
            await server.SendAsync(HttpMethod.Post, "/counter/add", busy, round + 1, new { opId = $"busy-{round}", amount = 1 });
            await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
        }

        Assert.True(server.Session(idle).RecoveryLsn > recoveryLsn, "the idle session was never checkpointed again");
        Assert.True(server.Runtime.Log.BeginAddress > recoveryLsn, "the log's start did not move past the idle session's old position");
        var (_, state) = await server.SendAsync(HttpMethod.Get, "/counter", idle, null);
        Assert.Equal(5, state.GetProperty("total").GetInt64());
    }

    [Fact]
    public async Task Crash_WithSessionsAtRest_RecoveryReadsThemDirectly_AndScansOnlyWhatFollows()
    {
        var idle = new string[5];
        string busy;
        long oldestAtRest;
        long scanStart;
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 100))
        {
            for (var s = 0; s < idle.Length; s++)
            {
                idle[s] = await server.StartSessionAsync();
                for (var i = 1; i <= 3; i++)
                {
                    await server.SendAsync(HttpMethod.Post, "/counter/add", idle[s], i, new { opId = $"{idle[s]}-{i}", amount = 1 });
                }
            }

            // The first service checkpoint checkpoints every session with a tail (none runs a request): all are at rest now.
            var first = await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            Assert.Equal(idle.Length, first.ForcedSessions);
            oldestAtRest = idle.Min(id => server.Session(id).RecoveryLsn);

            busy = await server.StartSessionAsync();
            for (var i = 1; i <= 20; i++)
            {
                await server.SendAsync(HttpMethod.Post, "/counter/add", busy, i, new { opId = $"busy-{i}", amount = 1 });
            }

            var second = await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            Assert.Equal(idle.Length, second.SessionsAtRest - 1); // the busy session, checkpointed by this one, is at rest as well
            Assert.True(second.AtRestScanFrom > oldestAtRest, $"the scan would start at {second.AtRestScanFrom}, not after the sessions at rest ({oldestAtRest})");
            Assert.True(server.Runtime.Log.BeginAddress <= oldestAtRest, "the log was truncated above a session at rest");
            scanStart = second.AtRestScanFrom;

            await server.SendAsync(HttpMethod.Post, "/counter/add", busy, 21, new { opId = "busy-21", amount = 1 });
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 100))
        {
            await server.RecoveryCompletion;
            var analysis = server.Runtime.Analysis!;
            Assert.Equal(scanStart, analysis.ScannedFrom);
            Assert.True(analysis.SessionsReadAtRest >= idle.Length, $"{analysis.SessionsReadAtRest} sessions read at rest");
            Assert.Equal(1, analysis.Requests); // busy-21 only
            foreach (var session in idle)
            {
                var (_, state) = await server.SendAsync(HttpMethod.Get, "/counter", session, null);
                Assert.Equal(3, state.GetProperty("total").GetInt64());
                var (retry, retryBody) = await server.SendAsync(HttpMethod.Post, "/counter/add", session, 3, new { opId = $"{session}-3", amount = 1 });
                Assert.Equal(HttpStatusCode.OK, retry.StatusCode);
                Assert.Equal(3, retryBody.GetProperty("total").GetInt64());
                var (next, nextBody) = await server.SendAsync(HttpMethod.Post, "/counter/add", session, 4, new { opId = $"{session}-4", amount = 1 });
                Assert.Equal(HttpStatusCode.OK, next.StatusCode);
                Assert.Equal(4, nextBody.GetProperty("total").GetInt64());
            }

            var (_, busyState) = await server.SendAsync(HttpMethod.Get, "/counter", busy, null);
            Assert.Equal(21, busyState.GetProperty("total").GetInt64());
        }
    }

    [Fact]
    public async Task Crash_WithSharedVariablesAtRest_RecoveryReadsTheirCheckpointsDirectly_AndRollsForwardLaterWrites()
    {
        string writer;
        long oldestVariableAtRest;
        long scanStart;
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 1))
        {
            writer = await server.StartSessionAsync();
            for (var i = 1; i <= 5; i++)
            {
                await server.SendAsync(HttpMethod.Post, "/shared/add", writer, i, new { opId = $"op-{i}", amount = i });
            }

            // The second service checkpoint forces the idle variables' (and the session's) checkpoints: all are at rest.
            await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            var second = await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            Assert.Equal(2, second.VariablesAtRest); // the total and the generated [Shared] LastWriter
            oldestVariableAtRest = server.Runtime.Shared.RecoveryPositions().Min(p => p.Lsn);
            Assert.True(second.AtRestScanFrom > oldestVariableAtRest, $"the scan would start at {second.AtRestScanFrom}, not after the variables at rest ({oldestVariableAtRest})");
            Assert.True(server.Runtime.Log.BeginAddress <= oldestVariableAtRest, "the log was truncated above a variable at rest");
            scanStart = second.AtRestScanFrom;

            // Written after the checkpoint listed it at rest: the scan meets this write and rolls the variable forward.
            await server.SendAsync(HttpMethod.Post, "/shared/add", writer, 6, new { opId = "op-6", amount = 6 });
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 1))
        {
            await server.RecoveryCompletion;
            var analysis = server.Runtime.Analysis!;
            Assert.Equal(scanStart, analysis.ScannedFrom);
            Assert.Equal(2, analysis.VariablesReadAtRest);
            Assert.Equal(1, analysis.Requests); // op-6 only
            var (_, state) = await server.SendAsync(HttpMethod.Get, "/shared", writer, null);
            Assert.Equal(21, state.GetProperty("total").GetInt64());
            Assert.Equal("op-6", state.GetProperty("lastWriter").GetString());
            var (next, nextBody) = await server.SendAsync(HttpMethod.Post, "/shared/add", writer, 7, new { opId = "op-7", amount = 7 });
            Assert.Equal(HttpStatusCode.OK, next.StatusCode);
            Assert.Equal(28, nextBody.GetProperty("total").GetInt64());
        }

        // Once more, with nothing written after the checkpoint: the values come from the at-rest records alone.
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 1))
        {
            await server.RecoveryCompletion;
            await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 1))
        {
            await server.RecoveryCompletion;
            Assert.Equal(2, server.Runtime.Analysis!.VariablesReadAtRest);
            var (_, state) = await server.SendAsync(HttpMethod.Get, "/shared", writer, null);
            Assert.Equal(28, state.GetProperty("total").GetInt64());
            Assert.Equal("op-7", state.GetProperty("lastWriter").GetString());
        }
    }

    [Fact]
    public async Task ServiceCheckpoint_WhileASessionStartIsInFlight_NeverStartsRecoveryOrTruncatesAfterIt()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        var session = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "a-1", amount = 1 });

        // A start record being logged (its session not yet in the table) lies at or above this tail.
        var tail = server.Runtime.Log.TailAddress;
        var starting = server.Runtime.Sessions.BeginStart(tail);
        var during = await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
        Assert.True(during.ScanFrom <= tail, $"recovery would start at {during.ScanFrom}, after a start in flight at {tail}");
        Assert.True(during.AtRestScanFrom <= tail, $"the scan would start at {during.AtRestScanFrom}, after a start in flight at {tail}");
        Assert.True(server.Runtime.Log.BeginAddress <= tail, "the log was truncated above a start in flight");

        server.Runtime.Sessions.EndStart(starting);
        var after = await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
        Assert.True(after.AtRestScanFrom > tail, "the scan start did not move once the start joined the table");
    }
}
