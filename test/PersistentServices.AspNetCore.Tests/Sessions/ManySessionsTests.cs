using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Sessions;

/// <summary>More sessions than one log record can list (the default MaxSessions is 100,000).</summary>
public sealed class ManySessionsTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task ServiceCheckpoint_WithMoreSessionsThanOneRecordLists_CountsThemAll_AndRecoveryFindsEverySession()
    {
        // A service checkpoint lists at most 4,096 positions of each kind (and only while they fit half a record); the
        // counts say how many sessions there were.
        const int Count = 5000;
        var ids = new List<string>();
        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            var runtime = server.Runtime;
            long last = 0;
            for (var i = 0; i < Count; i++)
            {
                var session = new Session(SessionId.NewRandom(), [], runtime.Time.GetUtcNow(), replaying: false);
                last = SessionRecords.AppendStarted(runtime.Log, session, runtime.Time.GetUtcNow());
                runtime.Sessions.TryAdd(session);
                ids.Add(session.IdText);
            }

            await runtime.Log.WaitUntilDurableAsync(last, Ct);
            var checkpoint = await runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            Assert.Equal(Count, checkpoint.Sessions);
            var record = (await runtime.Log.ReadAsync(checkpoint.Lsn, Ct)).Parse(ServiceCheckpoint.Parser);
            Assert.Equal(Count, record.SessionCount);
            Assert.True(record.Sessions.Count < Count);
            var (used, _) = await server.SendAsync(HttpMethod.Post, "/counter/add", ids[^1], 1, new { opId = "a", amount = 3 });
            Assert.Equal(HttpStatusCode.OK, used.StatusCode);
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            await server.RecoveryCompletion;
            Assert.Equal(Count, server.Runtime.Sessions.Count);
            Assert.Equal(Count - 1, server.Runtime.Sessions.NeverUsed);
            var (state, body) = await server.SendAsync(HttpMethod.Get, "/counter", ids[^1], null);
            Assert.Equal(HttpStatusCode.OK, state.StatusCode);
            Assert.Equal(3, body.GetProperty("total").GetInt64());
        }
    }
}
