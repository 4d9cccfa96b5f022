namespace PersistentServices.Replication;

/// <summary>
/// Accepts each signed control message (a promotion, a switchover) once (docs/replication.md, "Who may send what"): its
/// signature (the <c>PS-Signature</c> value, which holds its timestamp and MAC) is remembered for as long as a signature
/// is valid (<c>Calls.SignatureWindow</c> and the future skew), so the same message sent
/// again within that window, captured or repeated, is refused; after it, the signature check refuses it. Bounded: past
/// <see cref="MaxRemembered"/> live entries a new message is refused (fail closed) until some expire; a node takes a
/// handful of these a day. In memory: a restart forgets, and then the term each message names (a promotion's must be
/// newer than the node's, a switchover's the primary's own) is what refuses a replay.
/// </summary>
internal sealed class ControlReplayGuard(TimeProvider time, TimeSpan remember)
{
    /// <summary>The most signatures remembered at once.</summary>
    public const int MaxRemembered = 4096;

    private readonly Dictionary<string, DateTimeOffset> _seen = new(StringComparer.Ordinal);
    private readonly Lock _gate = new();

    /// <summary>True the first time <paramref name="signature"/> is seen within its validity; false for a replay, or when full.</summary>
    public bool FirstTime(string signature)
    {
        var now = time.GetUtcNow();
        lock (_gate)
        {
            if (_seen.Count >= MaxRemembered / 2)
            {
                foreach (var expired in _seen.Where(e => e.Value <= now).Select(e => e.Key).ToList())
                {
                    _seen.Remove(expired);
                }
            }

            if (_seen.ContainsKey(signature) || _seen.Count >= MaxRemembered)
            {
                return false;
            }

            _seen[signature] = now + remember;
            return true;
        }
    }
}
