namespace PersistentServices;

/// <summary>
/// The <c>Idempotency-Key</c> header on <c>[Persistent]</c> endpoints (docs/client.md, "Idempotency-Key"): clients that do
/// not speak the session protocol (curl, browsers, other languages, gateways) send one key per operation, and a repeat of
/// the key gets the stored reply instead of a second execution. Part of <see cref="PersistentServicesOptions"/>.
/// </summary>
public sealed class IdempotencyKeyOptions
{
    /// <summary>Whether <c>[Persistent]</c> endpoints accept <c>Idempotency-Key</c> requests. Default true.</summary>
    public bool Enabled { get; set; } = true;

    /// <summary>
    /// How long after a key's first request its reply is kept: a repeat within this time gets the stored reply. Counted
    /// from the first request's arrival (logged, so a restart does not extend it). Default 24 hours.
    /// </summary>
    public TimeSpan Retention { get; set; } = TimeSpan.FromHours(24);

    /// <summary>
    /// After <see cref="Retention"/> the reply is dropped but the key is remembered this much longer: a repeat gets
    /// <c>410 idempotency-key-expired</c>, never a second execution. After both, the key is forgotten and a request with it
    /// is a new request. Each remembered key holds a session's worth of memory (it counts against
    /// <see cref="PersistentServicesOptions.MaxSessions"/>, though its reply and state are dropped). Default 24 hours;
    /// <see cref="Timeout.InfiniteTimeSpan"/> remembers keys for as long as the service runs on this log.
    /// </summary>
    public TimeSpan ExpiredKeyRetention { get; set; } = TimeSpan.FromHours(24);

    /// <summary>
    /// Whether keyed requests from anonymous callers are refused (<c>401 idempotency-key-anonymous</c>). An anonymous
    /// caller's key is scoped to no one: any other anonymous caller who sends the same key gets its stored reply, so the key
    /// is then the only secret, like a session id (keys must be unguessable: a UUID, never an order number). Set this when
    /// every client of the service authenticates. Default false.
    /// </summary>
    public bool RequireAuthenticatedOwner { get; set; }

    /// <summary>Longest key accepted, in characters (after removing the quotes of a structured-field string). Default 255.</summary>
    public int MaxKeyLength { get; set; } = 255;

    internal IEnumerable<string> Validate()
    {
        if (Retention < TimeSpan.FromSeconds(1))
        {
            yield return $"PersistentServicesOptions.IdempotencyKeys.Retention must be at least one second (was {Retention}).";
        }

        if (ExpiredKeyRetention != Timeout.InfiniteTimeSpan && ExpiredKeyRetention < TimeSpan.Zero)
        {
            yield return $"PersistentServicesOptions.IdempotencyKeys.ExpiredKeyRetention must be zero or more, or Timeout.InfiniteTimeSpan (was {ExpiredKeyRetention}).";
        }

        if (MaxKeyLength is < 8 or > 1024)
        {
            yield return $"PersistentServicesOptions.IdempotencyKeys.MaxKeyLength must be between 8 and 1024 (was {MaxKeyLength}).";
        }
    }
}
