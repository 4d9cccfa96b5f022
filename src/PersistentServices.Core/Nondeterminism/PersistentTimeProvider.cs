using PersistentServices.Log.Records;
using PersistentServices.Nondeterminism;

namespace PersistentServices;

/// <summary>
/// The clock for persistent endpoints: inside a persistent request each reading of the time (<see cref="GetUtcNow"/>,
/// <see cref="GetTimestamp"/>) is logged, and a replayed request gets the logged reading back, so replay sees the time
/// the request saw. Outside persistent requests it is the underlying clock. Timers are the underlying clock's (they are
/// not replayed). Inject it (<c>PersistentTimeProvider</c>) instead of using <see cref="DateTime.UtcNow"/> (PS0201).
/// </summary>
public sealed class PersistentTimeProvider : TimeProvider
{
    private readonly TimeProvider _inner;

    /// <summary>Wraps <paramref name="inner"/> (usually <see cref="TimeProvider.System"/>).</summary>
    public PersistentTimeProvider(TimeProvider inner)
    {
        ArgumentNullException.ThrowIfNull(inner);
        _inner = inner;
    }

    /// <inheritdoc/>
    public override TimeZoneInfo LocalTimeZone => _inner.LocalTimeZone;

    /// <inheritdoc/>
    public override long TimestampFrequency => _inner.TimestampFrequency;

    /// <inheritdoc/>
    public override DateTimeOffset GetUtcNow()
        => new(LoggedValues.Int64(NondeterministicKind.UtcNow, () => _inner.GetUtcNow().UtcTicks), TimeSpan.Zero);

    /// <inheritdoc/>
    public override long GetTimestamp() => LoggedValues.Int64(NondeterministicKind.Timestamp, _inner.GetTimestamp);

    /// <inheritdoc/>
    public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
        => _inner.CreateTimer(callback, state, dueTime, period);
}
