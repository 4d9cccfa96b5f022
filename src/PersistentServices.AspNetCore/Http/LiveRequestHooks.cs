using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// Live execution's hooks on <see cref="LoggedRequestPipeline"/>: the request record is appended when the request begins
/// (not forced, [Phoenix/App Algorithm 3]; forced too only under <see cref="CallLogging.ForceEveryMessage"/>, the
/// baseline the benchmark compares with), and the reply waits at the domain's reply gate.
/// </summary>
internal sealed class LiveRequestHooks(PersistentRuntime runtime, Domain.DomainReplyGate gate) : ILoggedRequestHooks<PersistentRequest>
{
    private static readonly KeyValuePair<string, object?> EveryMessage = new("reason", "every-message");

    /// <summary>The request record joins the session's position stream.</summary>
    public LoggedPosition Place(PersistentRequest request)
        => SessionRecords.AppendRequest(runtime.Log, request.Session, request.Record, request.RecordSize);

    public ValueTask BegunAsync(PersistentRequest request)
    {
        runtime.CrashPoints.Hit(Checkpoints.CrashPoints.RequestLogged);
        if (runtime.Options.Calls.Logging != CallLogging.ForceEveryMessage)
        {
            return default;
        }

        // Phoenix/App Algorithm 1: the incoming request is forced too.
        runtime.Metrics.Forces.Add(1, EveryMessage);
        return runtime.Log.WaitUntilDurableAsync(request.Execution!.Position.RequestLsn, CancellationToken.None);
    }

    public void Ran(PersistentRequest request) => runtime.CrashPoints.Hit(Checkpoints.CrashPoints.RequestExecuted);

    public bool LogsReply(PersistentRequest request) => true;

    public ValueTask MakeSafeAsync(PersistentRequest request, long replyLsn) => gate.MakeSafeAsync(request, replyLsn);
}
