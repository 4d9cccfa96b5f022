using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// Replay's hooks on <see cref="LoggedRequestPipeline"/> ([MSP §4.1] "Logged Request Replay"; [Phoenix/App §2.5]): the
/// request is at its logged position; after it ran, the divergence checks; only a request without a logged reply logs
/// one, and that reply waits for the local log (it becomes the buffered reply a retry receives).
/// </summary>
internal sealed class ReplayHooks(PersistentRuntime runtime) : ILoggedRequestHooks<ReplayedRequest>
{
    public LoggedPosition Place(ReplayedRequest request) => request.Loaded.Position;

    public ValueTask BegunAsync(ReplayedRequest request) => default;

    /// <summary>The divergence checks: a shared value the running code cannot read, records left unconsumed or not matched, a reply unlike the logged one.</summary>
    public void Ran(ReplayedRequest request)
    {
        var cursor = request.Cursor;
        var session = request.Session;
        var record = request.Loaded.Record;
        var lsn = request.Loaded.Position.RequestLsn;

        // A logged shared value the running code cannot read: no session replay can repair that (fail-stop).
        if (cursor.SharedFailure is { } sharedFailure)
        {
            throw sharedFailure;
        }

        // A divergence found by the cursor counts even when the endpoint caught the exception.
        cursor.EnsureConsumed();
        if (cursor.Divergence is { } divergence)
        {
            throw new ReplayDivergenceException(divergence, session.TraceTag, lsn, record.Sequence) { ReplayedReply = request.Reply.Reply };
        }

        var reply = request.Reply.Reply;
        if (session.LoggedReplies.TryGetValue(record.Sequence, out var logged) && !logged.Hash.AsSpan().SequenceEqual(reply.Hash))
        {
            throw new ReplayDivergenceException(
                $"Replay of request {record.Sequence} of session {session.TraceTag} (LSN {lsn}, {record.Method} {record.Path}) produced status " +
                $"{reply.StatusCode} and a different reply than the {logged.StatusCode} logged before the crash: the endpoint is not deterministic " +
                "(time, random numbers, new ids or unlogged external state must come from the log) or its code changed.",
                session.TraceTag, lsn, record.Sequence) { ReplayedReply = reply };
        }
    }

    public bool LogsReply(ReplayedRequest request) => request.CutShort;

    /// <summary>
    /// The crash cut the request short; its replay finished it live, and its reply becomes the buffered reply a retry
    /// receives. Like any reply to an end client it leaves only once it and everything it depends on (the request's live
    /// reads and writes) are durable ([MSP Fig. 7]): otherwise a second crash could lose the live part after a client saw
    /// its reply, and the next replay could answer differently (another ticket, another version). In a domain, the retry
    /// that receives it passes the domain's gate as any duplicate does (<see cref="Domain.DomainReplyGate.DuplicateSafeAsync"/>).
    /// </summary>
    public ValueTask MakeSafeAsync(ReplayedRequest request, long replyLsn) => runtime.Log.WaitUntilDurableAsync(replyLsn, request.CancellationToken);
}
