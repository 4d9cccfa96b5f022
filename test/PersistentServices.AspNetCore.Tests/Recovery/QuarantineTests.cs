using System.Net;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;
using PersistentServices.Http.IdempotencyKeys;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Recovery;

/// <summary>
/// Issue 32, findings 2 and 7: a quarantined session (its replay diverged) never went away: a key's answered
/// <c>session-diverged</c> for ever, held a slot, kept health Degraded and pinned the log's begin address; <c>DELETE</c> of a
/// quarantined session answered 500. Quarantine is a state with an exit now: a marker (a session checkpoint without state)
/// lets the log go past the session's records, its owner can end it, a key's becomes an expired key after its retention,
/// and health counts only the quarantined sessions still live.
/// </summary>
public sealed class QuarantineTests : IDisposable
{
    private static readonly DateTimeOffset Start = new(2026, 11, 27, 12, 0, 0, TimeSpan.Zero);
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    public void Dispose()
    {
        _dir.Dispose();
    }

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task QuarantinedSession_IsMarked_StaysQuarantinedWithoutReplay_LetsTheLogGo_AndItsOwnerCanEndIt()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
            await server.CrashAsync();
        }

        _behavior.Salt = "-changed";
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 1, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(1, server.Runtime.QuarantinedSessions);
            Assert.NotNull(server.Session(session).QuarantineReason);
            var (diverged, why) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.InternalServerError, diverged.StatusCode);
            Assert.Contains("replaying request 1 of this session", why.GetProperty("detail").GetString(), StringComparison.Ordinal);
            await server.CrashAsync();
        }

        // The marker: quarantined again at the next start, nothing replayed (the old build's salt does not matter any more).
        _behavior.Salt = "";
        _behavior.Executions.Clear();
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.IdleCheckpointAfter = 1, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(1, server.Runtime.QuarantinedSessions);
            Assert.Equal(0, _behavior.Count("cart/add:a"));
            var (refused, problem) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.InternalServerError, refused.StatusCode);
            Assert.Equal("urn:persistentservices:problem:session-diverged", problem.GetProperty("type").GetString());

            // Issue 55: known from its marker, the quarantine names no request ("request 0" before).
            var detail = problem.GetProperty("detail").GetString();
            Assert.DoesNotContain("request 0", detail, StringComparison.Ordinal);
            Assert.Contains("At an earlier restart, replaying this session did not reproduce", detail, StringComparison.Ordinal);

            // Service checkpoints carry the marker forward: the log's start moves past the session's records.
            var recordOfRequest1 = server.Session(session).RecoveryLsn;
            var log = server.Runtime.Log;
            for (var i = 0; i < 3; i++)
            {
                var other = await server.StartSessionAsync();
                await server.SendAsync(HttpMethod.Post, "/counter/add", other, 1, new { opId = "o" + i, amount = 1 });
                await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            }

            Assert.True(log.BeginAddress > recordOfRequest1, $"the log's begin {log.BeginAddress} did not move past the quarantined session's marker {recordOfRequest1}");

            // Its owner ends it: 204, its slot is free, health counts it no more.
            var before = server.Runtime.Sessions.Count;
            using var end = new HttpRequestMessage(HttpMethod.Delete, $"/ps/sessions/{session}");
            using var ended = await server.Client.SendAsync(end, Ct);
            Assert.Equal(HttpStatusCode.NoContent, ended.StatusCode);
            Assert.Equal(before - 1, server.Runtime.Sessions.Count);
            Assert.Equal(0, server.Runtime.QuarantinedSessions);
            var (gone, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.NotFound, gone.StatusCode);
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(0, server.Runtime.QuarantinedSessions);
        }
    }

    [Fact]
    public async Task QuarantinedKey_SaysTheOperationRan_ThenAfterItsRetentionIsAnExpiredKey_NeverRunAgain()
    {
        var time = new FakeTimeProvider(Start);
        Action<PersistentServicesOptions> options = o => o.IdempotencyKeys.Retention = TimeSpan.FromMinutes(10);
        await using (var server = await TestServer.StartAsync(_dir.Path, options, time, behavior: _behavior))
        {
            using var first = KeyRequest("k-1");
            using var reply = await server.Client.SendAsync(first, Ct);
            Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
            await server.CrashAsync();
        }

        _behavior.Salt = "-changed";
        await using (var server = await TestServer.StartAsync(_dir.Path, options, time, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(1, server.Runtime.QuarantinedSessions);

            using var repeat = KeyRequest("k-1");
            using var diverged = await server.Client.SendAsync(repeat, Ct);
            Assert.Equal(HttpStatusCode.InternalServerError, diverged.StatusCode);
            var text = await diverged.Content.ReadAsStringAsync(Ct);
            Assert.Contains("idempotency-key-diverged", text, StringComparison.Ordinal);
            Assert.Contains("Do not send the operation again under a new key", text, StringComparison.Ordinal);

            // After the key's retention it is an expired key: 410, never a second execution; the quarantine is over.
            time.Advance(TimeSpan.FromMinutes(11));
            var (expired, _) = await server.App.Services.GetRequiredService<IdempotencyKeySessions>().ExpireAsync(NullLogger.Instance, Ct);
            Assert.Equal(1, expired);
            Assert.Equal(0, server.Runtime.QuarantinedSessions);
            using var later = KeyRequest("k-1");
            using var gone = await server.Client.SendAsync(later, Ct);
            Assert.Equal(HttpStatusCode.Gone, gone.StatusCode);
            Assert.Contains("idempotency-key-expired", await gone.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
            Assert.Equal(2, _behavior.Count("cart/add:keyed")); // its one execution, and its replay at the restart
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, options, time, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(0, server.Runtime.QuarantinedSessions);
            using var again = KeyRequest("k-1");
            using var stillGone = await server.Client.SendAsync(again, Ct);
            Assert.Equal(HttpStatusCode.Gone, stillGone.StatusCode);
            Assert.Equal(2, _behavior.Count("cart/add:keyed")); // nothing replayed: the key recovers from its expired-key checkpoint
        }

        static HttpRequestMessage KeyRequest(string key)
        {
            var request = TestServer.Request(HttpMethod.Post, "/cart/add", null, null, new { item = "keyed" });
            request.Headers.TryAddWithoutValidation("Idempotency-Key", $"\"{key}\"");
            return request;
        }
    }

    [Fact]
    public async Task QuarantinedKey_ItsMarkerIsCarriedForward_TheLogsBeginMovesPastIt()
    {
        // Issue 55: a quarantined key's marker held the log's begin back (reported: for the key's whole Retention). The
        // marker was carried forward like an idle session's checkpoint, after IdleCheckpointAfter (4) service checkpoints,
        // so the begin stayed at the marker for four minutes at a time; now at each service checkpoint after its first.
        Action<PersistentServicesOptions> options = _ => { };
        await using (var server = await TestServer.StartAsync(_dir.Path, options, behavior: _behavior))
        {
            using var first = new HttpRequestMessage(HttpMethod.Post, "/cart/add") { Content = System.Net.Http.Json.JsonContent.Create(new { item = "keyed" }) };
            first.Headers.TryAddWithoutValidation("Idempotency-Key", "\"k-1\"");
            using var reply = await server.Client.SendAsync(first, Ct);
            Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
            await server.CrashAsync();
        }

        _behavior.Salt = "-changed";
        await using (var server = await TestServer.StartAsync(_dir.Path, options, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(1, server.Runtime.QuarantinedSessions);
            var key = server.Runtime.Sessions.Enumerate().Single(s => s.QuarantineReason is not null);
            var marker = key.RecoveryLsn;
            var log = server.Runtime.Log;
            Assert.Equal(4, server.Runtime.Options.IdleCheckpointAfter);
            for (var i = 0; i < 2; i++)
            {
                var other = await server.StartSessionAsync();
                await server.SendAsync(HttpMethod.Post, "/counter/add", other, 1, new { opId = "o" + i, amount = 1 });
                await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            }

            Assert.True(log.BeginAddress > marker,
                $"the log's begin {log.BeginAddress} did not move past the quarantined key's marker {marker} (now recovery {key.RecoveryLsn}, retain {key.RetainLsn})");
        }
    }
}
