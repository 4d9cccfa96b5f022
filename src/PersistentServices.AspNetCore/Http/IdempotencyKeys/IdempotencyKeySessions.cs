using System.Text.Json;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Checkpoints;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// Key sessions: each <c>Idempotency-Key</c> (per principal) is a session of one request, so deduplication lives in the
/// service's log with the state and survives what sessions survive (crashes, replay, checkpoints, truncation). Its life:
/// <list type="number">
/// <item><b>live</b>: started by the key's first request (its start is appended, not forced: the reply's force covers it,
///   and nobody learns of the session before that); a repeat gets the buffered reply as a retry of request 1 does;</item>
/// <item><b>expired</b> after <see cref="IdempotencyKeyOptions.Retention"/>: a session checkpoint replaces the buffered
///   reply with a small <c>410 idempotency-key-expired</c> reply, so the session is still "between requests" (idle
///   checkpoints keep moving it, the log keeps being truncated) and a repeat gets that 410, never a second execution;</item>
/// <item><b>forgotten</b> after <see cref="IdempotencyKeyOptions.ExpiredKeyRetention"/> more: the session ends (logged,
///   not forced: a lost end only means the key is remembered and forgotten again later).</item>
/// </list>
/// Starting and ending a key session happen under one lock, so a request never starts a second session for a key whose
/// first is being forgotten. A DI singleton: the key resolver finds or starts key sessions with it, key expiry expires
/// and forgets them.
/// </summary>
internal sealed class IdempotencyKeySessions(PersistentRuntime runtime, SessionOwners owners, SessionStarter starter, Quarantines quarantines, ILoggerFactory loggers)
{
    /// <summary>The admission bucket of every key a gateway generated (not a principal's hash, not an address's).</summary>
    private static readonly byte[] GatewayKeysBucket = System.Security.Cryptography.SHA256.HashData("ps-gateway-keys"u8);

    /// <summary>
    /// The table's cap for a session or a client's own key: <see cref="PersistentServicesOptions.MaxSessions"/> besides the
    /// gateway keys remembered now, which have their own cap (<see cref="IdempotencyKeyOptions.MaxGatewayKeys"/>).
    /// </summary>
    public static int TableCap(PersistentRuntime runtime) => runtime.Options.MaxSessions + runtime.Sessions.CountOf(GatewayKeysBucket);

    /// <summary>Marks the buffered reply of an expired key (value <c>expired</c>).</summary>
    public const string StateHeader = KeySessions.StateHeader;

    private readonly ILogger _refusals = loggers.CreateLogger("PersistentServices.IdempotencyKeys");

    /// <summary>The key's session, started if it has none. Null when refused (the refusal was written).</summary>
    public async ValueTask<Session?> FindOrStartAsync(HttpContext context, IdempotencyKey key, ILogger logger)
    {
        Session? session = null;
        var refusal = Refusal.None;
        var startRefusal = StartRefusal.None;
        // A gateway's generated key counts in the gateway keys' own share, apart from MaxSessions: behind a gateway every
        // client has its address, and such keys are forgotten within minutes.
        var (bucket, share, byAddress) = key.Generated
            ? (GatewayKeysBucket, runtime.Options.IdempotencyKeys.MaxGatewayKeys ?? runtime.Options.MaxSessions, false)
            : owners.AdmissionBucket(context, key.Scope);
        var cap = key.Generated ? int.MaxValue : TableCap(runtime);
        lock (runtime.Sessions.FindOrStartGate)
        {
            if (runtime.Sessions.TryGet(key.SessionId, out var existing) ||
                (key.LegacySessionId is { } legacy && runtime.Sessions.TryGet(legacy, out existing) && existing.OwnerVersion == IdempotencyKey.LegacyKeySessionOwnerVersion))
            {
                // The id is derived from the principal and the key: another session with it is a hash collision of SHA-256.
                session = !existing.Ended && IdempotencyKey.IsKeySession(existing) && IdempotencyKey.IsGatewayKeySession(existing) == key.Generated &&
                          owners.Owns(context.User, existing) ? existing : null;
                refusal = session is null ? Refusal.Unavailable : Refusal.None;
            }
            else if ((startRefusal = runtime.Sessions.TryReserve(bucket, cap, share)) != StartRefusal.None)
            {
                // Each remembered key holds a slot, counted in the table and in the caller's share (its principal's, or
                // its address's when anonymous), so one client's flood of fresh keys cannot lock the others out.
                refusal = Refusal.Full;
            }
            else
            {
                var started = new Session(key.SessionId, key.Scope, runtime.Time.GetUtcNow(), replaying: false,
                    key.Generated ? IdempotencyKey.GatewayKeySessionOwnerVersion : IdempotencyKey.KeySessionOwnerVersion, runtime.Codec)
                {
                    AdmissionBucket = bucket,
                };
                var starting = runtime.Sessions.BeginStart(runtime.Log.TailAddress);
                try
                {
                    SessionRecords.AppendStarted(runtime.Log, started, started.StartedAt);
                    if (runtime.Sessions.TryAddReserved(started))
                    {
                        session = started;
                        IdempotencyKeyEvents.KeySessionStarted(logger, started.TraceTag);
                    }
                    else
                    {
                        runtime.Sessions.ReleaseReserved(bucket);
                        refusal = Refusal.Unavailable;
                    }
                }
                catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
                {
                    runtime.Sessions.ReleaseReserved(bucket);
                    refusal = Refusal.Unavailable;
                }
                finally
                {
                    runtime.Sessions.EndStart(starting);
                }
            }
        }

        switch (refusal)
        {
            case Refusal.Full when key.Generated:
                // The gateway holds a 503 unavailable and resends it: nothing ran, and a slot frees as generated keys are forgotten.
                IdempotencyKeyEvents.KeyRequestRefused(_refusals, "(new)", "gateway keys full");
                await ProtocolProblems.UnavailableAsync(context,
                    "The service remembers as many gateway-generated keys as it may (IdempotencyKeys.MaxGatewayKeys); nothing was executed. Send the same request again.").ConfigureAwait(false);
                return null;
            case Refusal.Full:
                await starter.RefuseAsync(context, startRefusal, bucket, byAddress, _refusals, "live sessions and remembered keys").ConfigureAwait(false);
                return null;
            case Refusal.Unavailable:
                await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
                return null;
            default:
                return session;
        }
    }

    /// <summary>True when <paramref name="reply"/> is the stand-in of an expired key's reply.</summary>
    public static bool IsExpiredMarker(BufferedReply? reply)
        => reply is not null && reply.StatusCode == StatusCodes.Status410Gone &&
           reply.Headers.Any(h => string.Equals(h.Key, StateHeader, StringComparison.OrdinalIgnoreCase) && h.Value is ["expired"]);

    /// <summary>True when the held reply is the (small, in memory) stand-in of an expired key's reply.</summary>
    public static bool IsExpiredMarker(HeldReply? held) => IsExpiredMarker(held?.Reply);

    /// <summary>The reply an expired key's repeat gets: kept in the key session's checkpoint instead of the real one.</summary>
    public static BufferedReply ExpiredReply(IdempotencyKeyOptions options)
    {
        var body = JsonSerializer.SerializeToUtf8Bytes(new Dictionary<string, object?>
        {
            ["type"] = ProtocolProblems.TypePrefix + "idempotency-key-expired",
            ["title"] = "Idempotency key expired",
            ["status"] = StatusCodes.Status410Gone,
            ["detail"] = $"This Idempotency-Key was first used more than {options.Retention} ago: its reply is no longer kept " +
                         "(IdempotencyKeys.Retention), and the request it named is never executed again. Use a new key for a new operation.",
        });
        return new BufferedReply(StatusCodes.Status410Gone,
            [new("Content-Type", ["application/problem+json"]), new(StateHeader, ["expired"])], body);
    }

    /// <summary>
    /// One pass over the key sessions: replies older than the retention are replaced by the expired stand-in, expired keys
    /// older than both retentions are forgotten, and key sessions whose first request never got logged (refused before
    /// it) end after the retention. Returns (expired, forgotten).
    /// </summary>
    public async Task<(int Expired, int Forgotten)> ExpireAsync(ILogger logger, CancellationToken cancellationToken)
    {
        if (!runtime.Availability.CanServe(RequestKind.BackgroundWork))
        {
            return (0, 0);
        }

        var options = runtime.Options.IdempotencyKeys;
        var now = runtime.Time.GetUtcNow();
        int expired = 0, forgotten = 0;
        foreach (var session in runtime.Sessions.All)
        {
            if (!IdempotencyKey.IsKeySession(session) || session.Ended)
            {
                continue;
            }

            var age = now - session.LastActivity;
            if (session.Diverged is not null)
            {
                // Quarantined (its replay diverged): after the retention the key is remembered as an expired key, whose repeats
                // get 410 and never run again; the quarantine ends, with its slot in the health count. (Its marker holds no log:
                // service checkpoints carry it forward, ServiceCheckpointer.CheckpointStaleAsync.)
                if (age >= options.Retention && session.QuarantineReason is not null &&
                    quarantines.Release(session, ExpiredReply(options), "the key's retention ended", logger))
                {
                    IdempotencyKeyEvents.KeyExpired(logger, session.TraceTag);
                    expired++;
                }

                continue;
            }

            if (!session.Ready.IsCompletedSuccessfully)
            {
                continue;
            }

            if (IdempotencyKey.IsGatewayKeySession(session))
            {
                // A gateway's key: no resend can come after its window (the gateway's hold, then a client's resend after
                // 504), so it is forgotten, reply and all, once its request is done (or never came).
                if (age >= options.GatewayKeyRetention && (session.LastSequence == 0 || session.LastReply is not null) && Forget(session, now, logger))
                {
                    forgotten++;
                }
            }
            else if (session.LastSequence == 0)
            {
                if (age >= options.Retention && Forget(session, now, logger))
                {
                    forgotten++;
                }
            }
            else if (IsExpiredMarker(session.LastReply))
            {
                if (options.ExpiredKeyRetention != Timeout.InfiniteTimeSpan && age >= options.Retention + options.ExpiredKeyRetention && Forget(session, now, logger))
                {
                    forgotten++;
                }
            }
            else if (session.LastReply is not null && age >= options.Retention &&
                     await DropReplyAsync(session, options, cancellationToken).ConfigureAwait(false))
            {
                IdempotencyKeyEvents.KeyExpired(logger, session.TraceTag);
                expired++;
            }
        }

        return (expired, forgotten);
    }

    /// <summary>
    /// A session checkpoint whose buffered reply is the expired stand-in and whose state is empty; from now on the session
    /// recovers from it. Appended, not forced: if a crash loses it, the recovered key holds its real reply again until the
    /// next pass expires it once more.
    /// </summary>
    private async Task<bool> DropReplyAsync(Session session, IdempotencyKeyOptions options, CancellationToken cancellationToken)
    {
        // The DV flushed must be the one the checkpoint holds (ServiceCheckpointer.CheckpointIdleSessionAsync).
        var flushed = session.Dv;
        if (!await runtime.BeforeSessionCheckpointAsync(session, cancellationToken).ConfigureAwait(false) || !session.ExecutionLock.Wait(0, CancellationToken.None))
        {
            return false;
        }

        try
        {
            if (session.Ended || !session.IsBetweenRequests || session.LastReply is null || !ReferenceEquals(session.Dv, flushed))
            {
                return false;
            }

            var record = SessionCheckpoints.Capture(session);
            record.LastReply = ExpiredReply(options).ToLogged();
            record.State.Clear(); // no request of a key session ever reads it again
            var lsn = runtime.Log.Append(RecordKind.SessionCheckpoint, record);
            session.ContinueFromCheckpoint(lsn, record);
            runtime.Metrics.SessionCheckpoints.Add(1);
            return true;
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            return false;
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    /// <summary>Ends a key session (the key is forgotten), under the lock that starts them.</summary>
    private bool Forget(Session session, DateTimeOffset now, ILogger logger)
    {
        lock (runtime.Sessions.FindOrStartGate)
        {
            if (!session.TryEnd())
            {
                return false;
            }

            try
            {
                SessionRecords.AppendEnded(runtime.Log, session, SessionEndReason.Expired, now);
            }
            catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
            {
                // The session is marked ended in memory only; the service must restart, and the recovered key is forgotten again later.
                return false;
            }

            runtime.Sessions.Remove(session.Id);
        }

        IdempotencyKeyEvents.KeyForgotten(logger, session.TraceTag);
        return true;
    }

    private enum Refusal
    {
        None,
        Full,
        Unavailable,
    }
}
