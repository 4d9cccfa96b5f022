using System.Diagnostics;
using Microsoft.AspNetCore.Http;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// One logged request as <see cref="LoggedRequestPipeline"/> runs it, live (<see cref="PersistentRequest"/>) or in replay
/// (<see cref="ReplayedRequest"/>): what the shared steps read, and what they leave for the hooks and for the caller.
/// One context for the steps and the hooks, as ASP.NET Core's output caching has one <c>OutputCacheContext</c> for its
/// policies.
/// </summary>
internal abstract class LoggedRequestContext(HttpContext httpContext)
{
    /// <summary>The request the endpoint sees: the client's (live) or one rebuilt from the logged request (replay).</summary>
    public HttpContext HttpContext { get; } = httpContext;

    /// <summary>The session the request belongs to.</summary>
    public Session Session { get; set; } = null!;

    /// <summary>The whole request body, as logged.</summary>
    public byte[] Body { get; set; } = [];

    /// <summary>Inside a service domain: the DV the request arrived with (merged into the session's when it begins).</summary>
    public Domain.DependencyVector? IncomingDv { get; set; }

    /// <summary>
    /// The DV header of the reply to a member: the session's DV when the reply was made safe, under the execution lock. Read
    /// later (when the reply is sent, the lock released) a rollback that began meanwhile could have reset it.
    /// </summary>
    public string? ReplyDvHeader { get; set; }

    /// <summary>Replay only: the cursor that hands the request its logged records back (null: live).</summary>
    public virtual ReplayCursor? Cursor => null;

    /// <summary>The request's activity, when someone listens (live requests only).</summary>
    public Activity? Activity { get; set; }

    /// <summary>Once begun: the request's execution at its place in the session's position stream.</summary>
    public RequestExecution? Execution { get; set; }

    /// <summary>Once run: the reply and the OnCompleted callbacks the endpoint registered.</summary>
    public CapturedReply Reply { get; set; }

    /// <summary>Once the reply record is appended: its LSN (what follows is making the reply safe). Null before.</summary>
    public long? ReplyLsn { get; set; }
}
