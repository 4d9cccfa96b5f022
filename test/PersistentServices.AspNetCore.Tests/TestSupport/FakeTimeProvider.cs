namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>A settable clock (Microsoft.Extensions.TimeProvider.Testing is not in the registry copy). Timers are not driven.</summary>
internal sealed class FakeTimeProvider(DateTimeOffset start) : TimeProvider
{
    private DateTimeOffset _now = start;

    public override DateTimeOffset GetUtcNow() => _now;

    public void Advance(TimeSpan by) => _now += by;
}
