using Microsoft.AspNetCore.Http;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// One live persistent request as it passes through <see cref="PersistentRequestHandler"/>'s steps (admit, the logged
/// request pipeline, send): what admission found and what the pipeline (<see cref="LoggedRequestContext"/>) and the
/// sending need, in one place.
/// </summary>
internal sealed class PersistentRequest(HttpContext httpContext) : LoggedRequestContext(httpContext)
{
    /// <summary>The session the request names in <c>PS-Session</c> (none for a key request).</summary>
    public SessionId SessionId { get; set; }

    /// <summary>How the request names its session: by the session headers or by its <see cref="Key"/>.</summary>
    public ISessionResolver Resolver { get; set; } = null!;

    /// <summary>The request's number in its session (<c>PS-Seq</c>).</summary>
    public long Sequence { get; set; }

    /// <summary>What identifies a retry as the same request (<see cref="RequestIdentity"/>).</summary>
    public byte[] Hash { get; set; } = [];

    /// <summary>The request's log record (built before admission so its size is checked before anything is logged).</summary>
    public LoggedRequest Record { get; set; } = null!;

    /// <summary>The record's serialized size.</summary>
    public int RecordSize { get; set; }

    /// <summary>The session's generation at admission (a rollback since voids the admission).</summary>
    public int Generation { get; set; }

    /// <summary>The admission's decision.</summary>
    public Admission Admission { get; set; }

    /// <summary>An <c>Idempotency-Key</c> request: its key (its <see cref="Session"/> is the key's one-request session); null for a session request.</summary>
    public IdempotencyKeys.IdempotencyKey? Key { get; set; }

    /// <summary>The session whose id and number the reply echoes: none for a key request (its key session is internal).</summary>
    public Session? EchoSession => Key is null ? Session : null;

    /// <summary>A call from another of the deployment's services: its name (verified); null for an end client.</summary>
    public string? Caller { get; set; }

    private int _answered; // 0: not yet; 1: the execution answers the client; 2: the client was answered reply-pending

    /// <summary>The execution claims the client's response: false when it was released already (<see cref="TryRelease"/>).</summary>
    public bool TryAnswer() => Interlocked.CompareExchange(ref _answered, 1, 0) != 2;

    /// <summary>The wait for the execution ended (ReplyTimeout): true when the client may be answered now, the execution going on without it.</summary>
    public bool TryRelease() => Interlocked.CompareExchange(ref _answered, 2, 0) == 0;
}
