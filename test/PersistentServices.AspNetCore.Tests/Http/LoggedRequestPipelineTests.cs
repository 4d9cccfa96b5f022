using System.Security.Claims;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Domain;
using PersistentServices.Http;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Http;

/// <summary>
/// The pipeline live execution and replay share (<see cref="LoggedRequestPipeline"/>): its steps one at a time, and the
/// whole pipeline on a <see cref="DefaultHttpContext"/> with hooks that record when they are called, on a running
/// service's log and session. The session resolver and the reply gate on a <see cref="DefaultHttpContext"/> too.
/// </summary>
public sealed class LoggedRequestPipelineTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task MergeDv_TheArrivedDvJoinsTheSessions_NullMergesNothing()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var before = session.Dv;

        Pipeline(server).MergeDv(session, null);
        Assert.Same(before, session.Dv);

        Pipeline(server).MergeDv(session, DependencyVector.Empty.With("B", new StateId(2, 4096)));
        Pipeline(server).MergeDv(session, DependencyVector.Empty.With("C", new StateId(1, 512)));

        Assert.Equal(new StateId(2, 4096), session.Dv["B"]);
        Assert.Equal(new StateId(1, 512), session.Dv["C"]);
    }

    [Fact]
    public async Task BeginExecution_AtTheLoggedPosition_LiveWithoutCursor_ReplayWithIt()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var position = new LoggedPosition(requestLsn: server.Runtime.Log.TailAddress, sequence: 1);

        var live = Pipeline(server).BeginExecution(session, position, cursor: null);
        var cursor = new ReplayCursor([], allowLiveTail: false, session.TraceTag, 1, position.RequestLsn);
        var replayed = Pipeline(server).BeginExecution(session, position, cursor);

        Assert.Same(position, live.Position);
        Assert.Same(session, live.Session);
        Assert.Same(server.Runtime.Log, live.Log);
        Assert.Null(live.Cursor);
        Assert.Same(cursor, replayed.Cursor);
        Assert.Same(position, replayed.Position);
    }

    [Fact]
    public async Task LogReply_AppendsTheShortReplyRecord_AndRecordsItsHashForReplay()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var position = new LoggedPosition(requestLsn: server.Runtime.Log.TailAddress, sequence: 4);
        var execution = Pipeline(server).BeginExecution(session, position, cursor: null);
        var reply = new BufferedReply(201, [], [1, 2, 3]);

        var lsn = Pipeline(server).LogReply(execution, reply);

        Assert.True(session.LoggedReplies.TryGetValue(4, out var logged));
        Assert.Equal(201, logged.StatusCode);
        Assert.Equal(reply.Hash, logged.Hash);
        await server.Runtime.Log.WaitUntilDurableAsync(lsn, Ct);
        var record = await server.Runtime.Log.ReadAsync(lsn, Ct);
        Assert.Equal(RecordKind.Reply, record.Kind);
        var sent = record.Parse(ReplySent.Parser);
        Assert.Equal(4, sent.Sequence);
        Assert.Equal(201, sent.StatusCode);
        Assert.Equal(position.RequestLsn, sent.RequestLsn);
        Assert.Equal(session.IdBytes, sent.SessionId);
        Assert.Equal(reply.Hash, sent.ReplyHash.ToByteArray());
    }

    [Fact]
    public async Task RunAsync_CallsTheHooksInOrder_RunsTheEndpoint_LogsTheReplyWithItsHash_ThenMakesItSafe()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var hooks = new RecordingHooks(server.Runtime.Log.TailAddress, sequence: 7, logsReply: true);
        var request = new HookedRequest(new DefaultHttpContext()) { Session = session, Body = "{}"u8.ToArray() };

        var captured = await Pipeline(server).RunAsync(request, hooks, async context =>
        {
            hooks.Calls.Add("endpoint");
            context.Response.StatusCode = 201;
            await context.Response.WriteAsync("made", Ct);
        });

        Assert.Equal(["Place", "Begun", "endpoint", "Ran", "LogsReply", "MakeSafe"], hooks.Calls);
        Assert.Equal(201, captured.Reply.StatusCode);
        Assert.Equal("made"u8.ToArray(), captured.Reply.Body.ToArray());
        Assert.Same(session, request.Execution!.Session);
        Assert.Equal(request.ReplyLsn, hooks.SafeLsn);
        Assert.True(session.LoggedReplies.TryGetValue(7, out var logged));
        Assert.Equal(captured.Reply.Hash, logged.Hash);
        await server.Runtime.Log.WaitUntilDurableAsync(request.ReplyLsn!.Value, Ct);
        Assert.Equal(RecordKind.Reply, (await server.Runtime.Log.ReadAsync(request.ReplyLsn.Value, Ct)).Kind);
    }

    [Fact]
    public async Task RunAsync_WhenTheHooksLogNoReply_AppendsNothing_AndNeverMakesItSafe()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var hooks = new RecordingHooks(server.Runtime.Log.TailAddress, sequence: 3, logsReply: false);
        var request = new HookedRequest(new DefaultHttpContext()) { Session = session };
        var tail = server.Runtime.Log.TailAddress;

        await Pipeline(server).RunAsync(request, hooks, context => Task.CompletedTask);

        Assert.Equal(["Place", "Begun", "Ran", "LogsReply"], hooks.Calls);
        Assert.Null(request.ReplyLsn);
        Assert.False(session.LoggedReplies.ContainsKey(3));
        Assert.Equal(tail, server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task RunAsync_WhenRanThrows_ItPropagates_AndNothingOfTheReplyIsLogged()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var hooks = new RecordingHooks(server.Runtime.Log.TailAddress, sequence: 2, logsReply: true) { ThrowInRan = true };
        var request = new HookedRequest(new DefaultHttpContext()) { Session = session };
        var tail = server.Runtime.Log.TailAddress;

        await Assert.ThrowsAsync<InvalidOperationException>(() => Pipeline(server).RunAsync(request, hooks, context => Task.CompletedTask));

        Assert.Equal(["Place", "Begun", "Ran"], hooks.Calls);
        Assert.False(session.LoggedReplies.ContainsKey(2));
        Assert.Equal(tail, server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task TheReplyGate_OutsideADomain_ForcesTheLogUpToTheReply_AndLetsDuplicatesGoAtOnce()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var gate = server.App.Services.GetRequiredService<DomainReplyGate>();
        var position = new LoggedPosition(requestLsn: server.Runtime.Log.TailAddress, sequence: 1);
        var request = new HookedRequest(new DefaultHttpContext()) { Session = session };
        request.Execution = Pipeline(server).BeginExecution(session, position, cursor: null);
        var lsn = Pipeline(server).LogReply(request.Execution, new BufferedReply(200, [], [9]));

        Assert.False(gate.InDomain);
        await gate.MakeSafeAsync(request, lsn);
        Assert.True(server.Runtime.Log.DurableUntil > lsn);

        await gate.DuplicateSafeAsync(request, session.Generation);
        Assert.False(request.HttpContext.Response.Headers.ContainsKey(ProtocolHeaders.Dv));
    }

    [Theory]
    [InlineData(null, "1", "session-header")]
    [InlineData("not-a-session", "1", "session-header")]
    [InlineData("SESSION", null, "sequence-header")]
    [InlineData("SESSION", "0", "sequence-header")]
    [InlineData("SESSION", "x", "sequence-header")]
    public async Task TheHeaderResolver_RefusesAMissingOrMalformedHeader_With400(string? session, string? sequence, string problem)
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var id = await server.StartSessionAsync();
        var context = new DefaultHttpContext();
        var body = new MemoryStream();
        context.Response.Body = body;
        if (session is not null)
        {
            context.Request.Headers[ProtocolHeaders.Session] = session == "SESSION" ? id : session;
        }

        if (sequence is not null)
        {
            context.Request.Headers[ProtocolHeaders.Sequence] = sequence;
        }

        var resolver = HeaderResolver(server);
        Assert.False(await resolver.IdentifyAsync(new PersistentRequest(context)));
        Assert.Equal(400, context.Response.StatusCode);
        Assert.Contains(problem, System.Text.Encoding.UTF8.GetString(body.ToArray()), StringComparison.Ordinal);
    }

    [Fact]
    public async Task TheHeaderResolver_NamesTheSessionAndNumber_AndFindsOnlyASessionTheCallerOwns()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var id = await server.StartSessionAsync(user: "alice");
        var context = new DefaultHttpContext { User = User("alice") };
        context.Request.Headers[ProtocolHeaders.Session] = id;
        context.Request.Headers[ProtocolHeaders.Sequence] = "5";
        var request = new PersistentRequest(context);
        var resolver = HeaderResolver(server);

        Assert.True(await resolver.IdentifyAsync(request));
        Assert.Equal(5, request.Sequence);
        Assert.Equal(id, request.SessionId.ToString());
        Assert.Same(server.Session(id), await resolver.ResolveAsync(request));
        Assert.True(await resolver.DecidedAsync(request));

        // Another principal: the session does not exist for it (404), its reply never leaks.
        var stranger = new DefaultHttpContext { User = User("mallory") };
        stranger.Request.Headers[ProtocolHeaders.Session] = id;
        stranger.Request.Headers[ProtocolHeaders.Sequence] = "5";
        var strangers = new PersistentRequest(stranger);
        Assert.True(await resolver.IdentifyAsync(strangers));
        Assert.Null(await resolver.ResolveAsync(strangers));
        Assert.Equal(404, stranger.Response.StatusCode);
    }

    private static ClaimsPrincipal User(string name)
        => new(new ClaimsIdentity([new Claim(ClaimTypes.NameIdentifier, name), new Claim(ClaimTypes.Name, name)], "Test"));

    private static LoggedRequestPipeline Pipeline(TestServer server) => server.App.Services.GetRequiredService<LoggedRequestPipeline>();

    private static HeaderSessionResolver HeaderResolver(TestServer server)
        => new(server.Runtime.Options, server.App.Services.GetRequiredService<SessionLookup>(), server.App.Services.GetRequiredService<SessionStarter>(), NullLogger.Instance);

    private sealed class HookedRequest(HttpContext context) : LoggedRequestContext(context);

    /// <summary>Hooks that record their calls, at a position of their own.</summary>
    private sealed class RecordingHooks(long requestLsn, long sequence, bool logsReply) : ILoggedRequestHooks<HookedRequest>
    {
        public List<string> Calls { get; } = [];

        public bool ThrowInRan { get; init; }

        public long? SafeLsn { get; private set; }

        public LoggedPosition Place(HookedRequest request)
        {
            Calls.Add("Place");
            return new LoggedPosition(requestLsn, sequence);
        }

        public ValueTask BegunAsync(HookedRequest request)
        {
            Calls.Add("Begun");
            return default;
        }

        public void Ran(HookedRequest request)
        {
            Calls.Add("Ran");
            if (ThrowInRan)
            {
                throw new InvalidOperationException("diverged");
            }
        }

        public bool LogsReply(HookedRequest request)
        {
            Calls.Add("LogsReply");
            return logsReply;
        }

        public ValueTask MakeSafeAsync(HookedRequest request, long replyLsn)
        {
            Calls.Add("MakeSafe");
            SafeLsn = replyLsn;
            return default;
        }
    }
}
