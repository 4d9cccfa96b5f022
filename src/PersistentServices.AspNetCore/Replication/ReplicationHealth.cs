using System.Globalization;
using Microsoft.Extensions.Logging;

namespace PersistentServices.Replication;

/// <summary>
/// What replication says to the health checks (docs/replication.md, "Health"; docs/operations.md): on a primary, degraded
/// while it holds acknowledgements back (fewer of its replicas answer than it requires: replies wait, 503 reply-pending) or
/// while fewer than the required replicas are within <see cref="ReplicationOptions.MaxHealthyLag"/> of its disk
/// (<see cref="LogShipper.LagTime"/>: acknowledgements then take about that long); on a replica, lagging while its hot
/// follower has been behind its copy for longer than that (<see cref="HotFollower.LagTime"/>: a promotion now would replay
/// the backlog before it serves), which readiness (a replica is never ready) and liveness (a replica is never restarted
/// for lagging: it stays <c>Healthy</c>) both report with the reason. Entering and leaving the lagging state is logged once
/// each (events 1456, 1457), when a health check notices it.
/// </summary>
internal sealed class ReplicationHealth(ReplicationNode node, ILogger<ReplicationHealth> logger)
{
    private readonly Lock _gate = new();
    private string? _lagging;

    /// <summary>Whether the node lags now (as the last check found).</summary>
    public bool IsLagging => Volatile.Read(ref _lagging) is not null;

    /// <summary>
    /// On a primary, why its readiness is degraded (acknowledgements held back, or its required replicas lag), else null.
    /// On a replica, why it lags (its hot follower is behind), else null. Null without replication.
    /// </summary>
    public string? Degraded()
    {
        if (!node.Enabled)
        {
            return null;
        }

        var max = node.Options.MaxHealthyLag;
        switch (node.Role)
        {
            case ReplicationRole.Primary when node.Watermark is { Required: > 0 } watermark:
                var shippers = node.Shippers;
                var heldBack = HeldBack(watermark.Required, watermark.Replicas, shippers.Count(s => s.Reachable));
                var lagging = Note(ReplicationRole.Primary, LaggingReplicas(watermark.Required, [.. shippers.Select(s => (s.Replica.ToString(), s.LagTime))], max), max);
                return heldBack ?? lagging;
            case ReplicationRole.Replica when node.Follower is { Running: true } follower:
                return Note(ReplicationRole.Replica, LaggingFollower(follower.LagTime, follower.LagRequests, max), max);
            default:
                return Note(node.Role, null, max);
        }
    }

    /// <summary>Why a primary holds acknowledgements back (fewer than <paramref name="required"/> of its replicas answer), or null.</summary>
    internal static string? HeldBack(int required, int replicas, int reachable)
        => reachable >= required
            ? null
            : $"{reachable} of the {replicas} replicas answer and {required} must hold a record before it is acknowledged: " +
              "replies wait (503 reply-pending) until enough of them are back (docs/replication.md)";

    /// <summary>
    /// Why a primary's required replicas lag: fewer than <paramref name="required"/> of them hold what became durable on
    /// its disk <paramref name="max"/> ago (each reply then waits about as long), or null.
    /// </summary>
    internal static string? LaggingReplicas(int required, IReadOnlyList<(string Replica, TimeSpan Lag)> replicas, TimeSpan max)
    {
        if (required <= 0 || replicas.Count(r => r.Lag <= max) >= required)
        {
            return null;
        }

        var behind = string.Join(", ", replicas.Where(r => r.Lag > max).Select(r => $"{r.Replica} {Ms(r.Lag)} ms behind"));
        return $"fewer than the {required} required replicas are within MaxHealthyLag ({Ms(max)} ms) of this primary's disk ({behind}): " +
               "acknowledgements wait for them (docs/replication.md)";
    }

    /// <summary>Why a replica lags: its hot follower has been behind its copy longer than <paramref name="max"/>, or null.</summary>
    internal static string? LaggingFollower(TimeSpan lag, long requests, TimeSpan max)
        => lag <= max
            ? null
            : $"the hot follower has been behind this replica's copy for {Ms(lag)} ms (MaxHealthyLag {Ms(max)} ms; {requests} answered requests not replayed yet): " +
              "a promotion now would replay them before it serves (docs/replication.md)";

    /// <summary>Records whether the node lags now; logs entering and leaving that state once each. Returns <paramref name="reason"/>.</summary>
    internal string? Note(ReplicationRole role, string? reason, TimeSpan max)
    {
        bool entered, left;
        lock (_gate)
        {
            entered = reason is not null && _lagging is null;
            left = reason is null && _lagging is not null;
            Volatile.Write(ref _lagging, reason);
        }

        var name = role == ReplicationRole.Primary ? "primary" : "replica";
        if (entered)
        {
            ReplicationServiceEvents.Lagging(logger, name, (long)max.TotalMilliseconds, reason!);
        }
        else if (left)
        {
            ReplicationServiceEvents.NoLongerLagging(logger, name, (long)max.TotalMilliseconds);
        }

        return reason;
    }

    private static string Ms(TimeSpan span) => ((long)span.TotalMilliseconds).ToString(CultureInfo.InvariantCulture);
}
