using PersistentServices.Diagnostics;

namespace OpenTelemetry.Trace;

/// <summary>Adds PersistentServices' spans to an OpenTelemetry tracer provider.</summary>
public static class PersistentServicesTracerProviderBuilderExtensions
{
    /// <summary>
    /// Subscribes to the <c>PersistentServices</c> activity source: a persistent request's span
    /// (<c>persistentservices.request</c>) with its log force or distributed flush, and a recovered session's replay
    /// (<c>persistentservices.replay.session</c>). docs/telemetry.md shows the span tree and the tags.
    /// </summary>
    /// <param name="builder">The tracer provider builder (<c>WithTracing(t => ...)</c>).</param>
    /// <returns>The same builder.</returns>
    public static TracerProviderBuilder AddPersistentServicesInstrumentation(this TracerProviderBuilder builder)
    {
        ArgumentNullException.ThrowIfNull(builder);
        return builder.AddSource(PersistentServicesTelemetry.ActivitySourceName);
    }
}
