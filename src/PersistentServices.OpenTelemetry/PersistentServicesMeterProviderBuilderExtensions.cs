using PersistentServices;
using PersistentServices.Diagnostics;

namespace OpenTelemetry.Metrics;

/// <summary>Adds PersistentServices' metrics to an OpenTelemetry meter provider.</summary>
public static class PersistentServicesMeterProviderBuilderExtensions
{
    /// <summary>
    /// Subscribes to the services' meter (<c>PersistentServices</c>) and the exactly-once client's
    /// (<c>PersistentServices.Client</c>): log commits and forces, requests by outcome, calls, checkpoints, sessions,
    /// recovery. Durations are in seconds, and their histograms carry bucket boundaries sized for them (from 100 µs).
    /// docs/telemetry.md lists every instrument.
    /// </summary>
    /// <param name="builder">The meter provider builder (<c>WithMetrics(m => ...)</c>).</param>
    /// <returns>The same builder.</returns>
    public static MeterProviderBuilder AddPersistentServicesInstrumentation(this MeterProviderBuilder builder)
    {
        ArgumentNullException.ThrowIfNull(builder);
        return builder.AddMeter(PersistentServicesTelemetry.MeterName, PersistentServicesTelemetry.ClientMeterName);
    }
}
