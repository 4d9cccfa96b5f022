using Microsoft.AspNetCore.Http;
using PersistentServices.Http;

namespace PersistentServices.Recovery;

/// <summary>A logged request as replay runs it through <see cref="LoggedRequestPipeline"/>: its context rebuilt from the log, and its records handed back by its cursor.</summary>
internal sealed class ReplayedRequest(HttpContext httpContext, LoadedRequest loaded, ReplayCursor cursor, bool cutShort, CancellationToken cancellationToken)
    : LoggedRequestContext(httpContext)
{
    /// <summary>The logged request and the records it wrote.</summary>
    public LoadedRequest Loaded { get; } = loaded;

    public override ReplayCursor Cursor { get; } = cursor;

    /// <summary>
    /// The request has no reply in the log: the crash cut it short, or an orphan cut removed its records from the first
    /// orphaned one on. Past its records it runs live, and its reply is logged now.
    /// </summary>
    public bool CutShort { get; } = cutShort;

    /// <summary>Recovery's (or the rollback's) cancellation.</summary>
    public CancellationToken CancellationToken { get; } = cancellationToken;
}
