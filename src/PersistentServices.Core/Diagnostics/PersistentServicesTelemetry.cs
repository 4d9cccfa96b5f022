namespace PersistentServices;

/// <summary>
/// The names under which PersistentServices emits traces and metrics, for <c>AddSource</c> and <c>AddMeter</c> in an
/// OpenTelemetry set-up (or use the PersistentServices.OpenTelemetry package's
/// <c>AddPersistentServicesInstrumentation()</c>, which adds all three). docs/telemetry.md lists every span and instrument.
/// </summary>
public static class PersistentServicesTelemetry
{
    /// <summary>The services' <see cref="System.Diagnostics.ActivitySource"/>: <c>PersistentServices</c>.</summary>
    public const string ActivitySourceName = "PersistentServices";

    /// <summary>The services' <see cref="System.Diagnostics.Metrics.Meter"/>: <c>PersistentServices</c>.</summary>
    public const string MeterName = "PersistentServices";

    /// <summary>The exactly-once client's meter (PersistentServices.Client): <c>PersistentServices.Client</c>.</summary>
    public const string ClientMeterName = "PersistentServices.Client";
}
