using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.Testing;

/// <summary>
/// One replay check inside the service build under check (docs/operations.md, "Replay check before an upgrade"). It
/// rides on the service's own recovery (<see cref="RecoveryHostedService"/>) with three differences: the log is the
/// sandbox's copy (<see cref="Apply"/>); sessions replay one at a time in log order, each divergence quarantining only its
/// session (<see cref="Prepare"/>); and when recovery is done, a report is built instead of serving
/// (<see cref="CompleteAsync"/>). In a psctl run it is written to the sandbox and the service stops.
/// </summary>
internal sealed partial class ReplayCheckRun(ReplayCheckSandbox sandbox, bool inProcess, IHostApplicationLifetime lifetime, ILogger<ReplayCheckRun> logger)
{
    private const int RequestBodyLimit = 2000;
    private const int ReplyBodyLimit = 4000;
    private static readonly TimeSpan ProgressInterval = TimeSpan.FromMilliseconds(250);

    private readonly TaskCompletionSource<ReplayCheckReport> _report = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private List<Session> _sessions = [];
    private volatile Session[] _replaying = [];
    private Dictionary<Session, int> _requests = [];
    private int _notChecked;
    private int _finished;

    public ReplayCheckSandbox Sandbox => sandbox;

    /// <summary>Bodies in the report: in process (a test's own data), or when psctl was asked (<c>--show-bodies</c>).</summary>
    private bool ShowBodies => inProcess || sandbox.ShowBodies;

    /// <summary>Completes with the report once the check finished (or could not run).</summary>
    public Task<ReplayCheckReport> Report => _report.Task;

    /// <summary>
    /// Makes the runtime's options those of the check, whatever the application configured after
    /// <c>AddPersistentServices</c>: the sandbox's copy of the log (never the service's own directory), every divergence
    /// quarantining only its session, one session at a time.
    /// </summary>
    public void Apply(PersistentServicesOptions options)
    {
        options.LogDirectory = sandbox.LogDirectory;
        options.OnDivergence = DivergencePolicy.QuarantineSession;
        options.ReplayParallelism = 1;
        options.RecoveryFailureExitCode = inProcess ? null : options.RecoveryFailureExitCode ?? 70;
    }

    /// <summary>
    /// Before replay: sessions in log order; a last request without a logged reply (cut short by the crash) is taken out,
    /// since recovery would run it live past its log and there is no reply to compare.
    /// </summary>
    public void Prepare(List<Session> sessions)
    {
        sessions.Sort((a, b) => a.RecoveryLsn.CompareTo(b.RecoveryLsn));
        foreach (var session in sessions)
        {
            if (session.PositionStream is [.., var last] && !session.LoggedReplies.ContainsKey(last.Sequence))
            {
                session.PositionStream.RemoveAt(session.PositionStream.Count - 1);
                _notChecked++;
            }
        }

        _sessions = sessions;
        _requests = sessions.ToDictionary(s => s, s => s.PositionStream.Count);
        _replaying = [.. sessions.Where(s => _requests[s] > 0)]; // as the report counts them: not those with nothing to replay
        Started(logger, sessions.Count, _requests.Values.Sum(n => (long)n), _notChecked);
    }

    /// <summary>Runs <paramref name="replay"/> (the recovery's replay of every session), then reports.</summary>
    public async Task RunAsync(PersistentRuntime runtime, Func<Task> replay)
    {
        using var replayed = new CancellationTokenSource();
        var progress = inProcess ? Task.CompletedTask : WriteProgressAsync(replayed.Token);
        try
        {
            await replay().ConfigureAwait(false);
        }
        finally
        {
            await replayed.CancelAsync().ConfigureAwait(false);
            try
            {
                await progress.ConfigureAwait(false);
            }
            finally
            {
                await CompleteAsync(runtime).ConfigureAwait(false); // the report, whatever became of the progress file
            }
        }
    }

    /// <summary>
    /// For psctl's progress display: every <see cref="ProgressInterval"/> until the replay ends, and once more then, how
    /// many sessions have finished their replay (fine or diverged) of how many there are (the sandbox's progress.json).
    /// </summary>
    private async Task WriteProgressAsync(CancellationToken replayEnded)
    {
        using var timer = new PeriodicTimer(ProgressInterval);
        try
        {
            do
            {
                WriteProgress();
            }
            while (await timer.WaitForNextTickAsync(replayEnded).ConfigureAwait(false));
        }
        catch (OperationCanceledException) when (replayEnded.IsCancellationRequested)
        {
            WriteProgress();
        }
    }

    private void WriteProgress()
    {
        var sessions = _replaying;
        sandbox.WriteProgress(sessions.Count(s => s.Ready.IsCompleted || s.Diverged is not null), sessions.Length);
    }

    /// <summary>Recovery finished, failed or was stopped: the report.</summary>
    public async Task CompleteAsync(PersistentRuntime runtime)
    {
        if (Volatile.Read(ref _finished) != 0)
        {
            return;
        }

        var divergences = new List<ReplayCheckDivergence>();
        long requests = 0;
        var fine = 0;
        var idle = 0;
        var unfinished = 0;
        foreach (var session in _sessions)
        {
            if (session.Diverged is { } divergence)
            {
                requests += session.PositionStream.TakeWhile(p => p.Sequence < divergence.Sequence).Count() + 1; // with the one that differs
                divergences.Add(await DescribeAsync(runtime, session, divergence, ShowBodies).ConfigureAwait(false));
            }
            else if (session.Ready.IsCompletedSuccessfully && _requests[session] == 0)
            {
                idle++;
            }
            else if (session.Ready.IsCompletedSuccessfully)
            {
                fine++;
                requests += _requests[session]; // a session checkpoint may have cleared its position stream since
            }
            else
            {
                unfinished++;
            }
        }

        var failure = runtime.Availability.Failure?.Message ?? (unfinished > 0 ? $"the service stopped before {unfinished} session(s) finished their replay" : null);
        var result = failure is not null ? ReplayCheckResult.Failed : divergences.Count > 0 ? ReplayCheckResult.Diverged : ReplayCheckResult.Passed;
        Finish(new ReplayCheckReport(result, sandbox.Source, _sessions.Count - idle, fine, requests, divergences, _notChecked, failure) { SessionsWithNothingToReplay = idle });
    }

    /// <summary>The host stops and the check did not report: the log could not be opened, or replay never started.</summary>
    public void Abandon(PersistentRuntime runtime)
    {
        if (Volatile.Read(ref _finished) != 0)
        {
            return;
        }

        var result = runtime.Availability.Stage == RecoveryStage.Failed && runtime.Analysis is null ? ReplayCheckResult.NotChecked : ReplayCheckResult.Failed;
        Finish(new ReplayCheckReport(result, sandbox.Source, _sessions.Count, 0, 0, [], _notChecked,
            runtime.Availability.Failure?.Message ?? "the service stopped before recovery replayed anything"));
    }

    private void Finish(ReplayCheckReport report)
    {
        if (Interlocked.Exchange(ref _finished, 1) != 0)
        {
            return;
        }

        if (!inProcess)
        {
            DurableFile.WriteAtomically(sandbox.ReportPath, ReplayCheckText.ToJson(report, sandbox.ShowSessionIds));
            Finished(logger, report.Result, report.Sessions, report.Divergences.Count, sandbox.ReportPath);
            lifetime.StopApplication();
        }
        else
        {
            Finished(logger, report.Result, report.Sessions, report.Divergences.Count, "(in process)");
        }

        _report.TrySetResult(report);
    }

    private static async Task<ReplayCheckDivergence> DescribeAsync(PersistentRuntime runtime, Session session, ReplayDivergenceException divergence, bool showBodies)
    {
        var position = session.PositionStream.FirstOrDefault(p => p.RequestLsn == divergence.Lsn);
        var request = position?.RequestRecord?.Parse(LoggedRequest.Parser);
        if (request is null && divergence.Lsn > 0)
        {
            try
            {
                request = (await runtime.Log.ReadAsync(divergence.Lsn, CancellationToken.None).ConfigureAwait(false)).Parse(LoggedRequest.Parser);
            }
            catch (Exception ex) when (ex is LogFaultedException or LogCorruptionException or IOException or InvalidOperationException or ObjectDisposedException)
            {
                request = null;
            }
        }

        var requestType = request?.Headers.FirstOrDefault(h => string.Equals(h.Name, "Content-Type", StringComparison.OrdinalIgnoreCase))?.Values.FirstOrDefault();
        var hasLogged = session.LoggedReplies.TryGetValue(divergence.Sequence, out var logged);
        var reply = divergence.ReplayedReply;
        return new ReplayCheckDivergence(session.TraceTag, session.IdText, divergence.Sequence, divergence.Lsn, divergence.Message)
        {
            Method = request?.Method ?? "",
            Path = request is null ? "" : request.PathBase + request.Path + request.QueryString,
            Endpoint = request?.Endpoint ?? "",
            RequestBody = request is null ? "" : showBodies ? ReplayCheckText.Body(request.Body.Span, requestType, RequestBodyLimit) : ReplayCheckText.Hidden(request.Body.Length, requestType),
            LoggedStatusCode = hasLogged ? logged.StatusCode : null,
            LoggedReplyHash = hasLogged ? Convert.ToHexStringLower(logged.Hash) : null,
            ReplayedStatusCode = reply?.StatusCode,
            ReplayedContentType = reply?.ContentType,
            ReplayedBody = reply is null ? null : showBodies ? ReplayCheckText.Body(reply.Body, reply.ContentType, ReplyBodyLimit) : ReplayCheckText.Hidden(reply.Body.Length, reply.ContentType),
            ReplayedReplyHash = reply is null ? null : Convert.ToHexStringLower(reply.Hash),
        };
    }

    [LoggerMessage(1221, LogLevel.Information,
        "Replay check: {Sessions} sessions to replay one at a time in log order ({Requests} requests); {NotChecked} last requests cut short by the crash are not run")]
    private static partial void Started(ILogger logger, int sessions, long requests, int notChecked);

    [LoggerMessage(1222, LogLevel.Information, "Replay check finished: {Result}; {Sessions} sessions replayed, {Diverged} diverged; report: {Report}")]
    private static partial void Finished(ILogger logger, ReplayCheckResult result, int sessions, int diverged, string report);
}
