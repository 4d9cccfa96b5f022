using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// Runs <see cref="IdempotencyKeySessions.ExpireAsync"/> about every tenth of <see cref="IdempotencyKeyOptions.Retention"/> or of
/// <see cref="IdempotencyKeyOptions.GatewayKeyRetention"/>, the shorter
/// (at least every second, at most every minute), on the injected <see cref="TimeProvider"/>.
/// </summary>
internal sealed class IdempotencyKeyExpiryService(PersistentRuntime runtime, IdempotencyKeySessions keySessions, ILogger<IdempotencyKeyExpiryService> logger) : BackgroundService
{
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        var keys = runtime.Options.IdempotencyKeys;
        var period = TimeSpan.FromTicks(Math.Clamp(Math.Min(keys.Retention.Ticks, keys.GatewayKeyRetention.Ticks) / 10, TimeSpan.TicksPerSecond, TimeSpan.TicksPerMinute));
        using var timer = new PeriodicTimer(period, runtime.Time);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                await keySessions.ExpireAsync(logger, stoppingToken).ConfigureAwait(false);
            }
        }
        catch (OperationCanceledException)
        {
        }
    }
}
