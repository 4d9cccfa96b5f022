using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Diagnostics;

namespace PersistentServices.AspNetCore.Tests.Diagnostics;

/// <summary>
/// The library's ActivitySource, seen by an <see cref="ActivityListener"/> as an exporter would see it. The source is
/// process-wide, so the listener also hears the servers of tests running in parallel: each test looks only at the
/// activities of its own session (the session tag, a hash of its random id) and at their children (their trace ids).
/// </summary>
public sealed class TracingTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly ConcurrentQueue<Activity> _stopped = new();
    private readonly ActivityListener _listener;

    public TracingTests()
    {
        _listener = new ActivityListener
        {
            ShouldListenTo = source => source.Name == PersistentServicesTracing.SourceName,
            Sample = (ref ActivityCreationOptions<ActivityContext> _) => ActivitySamplingResult.AllDataAndRecorded,
            ActivityStopped = _stopped.Enqueue,
        };
        ActivitySource.AddActivityListener(_listener);
    }

    public void Dispose()
    {
        _listener.Dispose();
        _dir.Dispose();
    }

    [Fact]
    public async Task PersistentRequest_TracesAdmissionAppendForceAndSend_WithAHashedSessionTag()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        var session = await server.StartSessionAsync();
        Assert.Equal(HttpStatusCode.OK, (await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" })).Response.StatusCode);
        Assert.Equal(HttpStatusCode.OK, (await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" })).Response.StatusCode);
        Assert.Equal(HttpStatusCode.Conflict, (await server.SendAsync(HttpMethod.Post, "/cart/add", session, 5, new { item = "a" })).Response.StatusCode);

        var tag = server.Session(session).TraceTag;
        var requests = _stopped.Where(a => a.OperationName == "persistentservices.request" && Equals(a.GetTagItem(PersistentServicesTracing.SessionTagName), tag)).ToList();
        Assert.Equal(["executed", "duplicate", "refused"], requests.Select(a => a.GetTagItem(PersistentServicesTracing.AdmissionTagName) as string));
        var executed = requests[0];
        Assert.NotNull(executed.GetTagItem(PersistentServicesTracing.LsnTagName));
        Assert.Contains(executed.Events, e => e.Name == "persistentservices.reply.appended");
        Assert.Contains(executed.Events, e => e.Name == "persistentservices.reply.sent");
        var traces = requests.Select(a => a.TraceId).ToHashSet();
        var force = Assert.Single(_stopped, a => a.OperationName == "persistentservices.log.force" && traces.Contains(a.TraceId));
        Assert.Equal(executed.SpanId, force.ParentSpanId);

        // Never the session id itself (a bearer secret for anonymous sessions): a short hash.
        Assert.All(requests, a =>
        {
            var tag = Assert.IsType<string>(a.GetTagItem(PersistentServicesTracing.SessionTagName));
            Assert.Equal(12, tag.Length);
            Assert.DoesNotContain(a.TagObjects, t => t.Value is string value && value.Contains(session, StringComparison.Ordinal));
        });
    }

    [Fact]
    public async Task Replay_TracesEachSessionReplay()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            await server.RecoveryCompletion;
            var tag = server.Session(session).TraceTag;
            var replay = Assert.Single(_stopped, a => a.OperationName == "persistentservices.replay.session" && Equals(a.GetTagItem(PersistentServicesTracing.SessionTagName), tag));
            Assert.Equal(2L, replay.GetTagItem("persistentservices.replay.requests"));
        }
    }
}
