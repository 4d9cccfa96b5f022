namespace PersistentServices.Http;

/// <summary>
/// What live execution and replay do differently around <see cref="LoggedRequestPipeline"/>'s shared steps, in the shape
/// of ASP.NET Core's <c>IOutputCachePolicy</c>: the pipeline calls each hook at its place. The implementations, side by
/// side, are the whole difference between the two paths:
/// <list type="table">
/// <listheader><term>hook</term><description>live (<see cref="LiveRequestHooks"/>) | replay (<see cref="Recovery.ReplayHooks"/>)</description></listheader>
/// <item><term><see cref="Place"/></term><description>the request record appended now | the position the log holds</description></item>
/// <item><term><see cref="BegunAsync"/></term><description>a crash point; the request record forced under <c>ForceEveryMessage</c> | nothing</description></item>
/// <item><term><see cref="Ran"/></term><description>a crash point | the divergence checks (cursor consumed, reply hash)</description></item>
/// <item><term><see cref="LogsReply"/></term><description>always | only the request a crash (or an orphan cut) left without its reply</description></item>
/// <item><term><see cref="MakeSafeAsync"/></term><description>the domain's reply gate (<see cref="Domain.DomainReplyGate"/>) | the local log forced</description></item>
/// </list>
/// Before the pipeline, live admits the request (<see cref="RequestAdmission"/>) and replay routes its rebuilt context
/// and cuts orphans; after it, live completes the session and sends the reply, replay keeps the last reply.
/// </summary>
internal interface ILoggedRequestHooks<in TRequest>
    where TRequest : LoggedRequestContext
{
    /// <summary>Begin: the request's place in its session's position stream.</summary>
    Sessions.LoggedPosition Place(TRequest request);

    /// <summary>Begun, before the endpoint runs.</summary>
    ValueTask BegunAsync(TRequest request);

    /// <summary>The endpoint ran (<see cref="LoggedRequestContext.Reply"/> is set); nothing of the reply is logged yet.</summary>
    void Ran(TRequest request);

    /// <summary>Whether the reply record is appended for this request.</summary>
    bool LogsReply(TRequest request);

    /// <summary>The reply record was appended at <paramref name="replyLsn"/>: wait until the reply may leave.</summary>
    ValueTask MakeSafeAsync(TRequest request, long replyLsn);
}
