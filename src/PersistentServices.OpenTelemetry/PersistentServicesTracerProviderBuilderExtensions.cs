using PersistentServices;
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
    /// <remarks>
    /// Also subscribes to ASP.NET Core's own activity source (<c>Microsoft.AspNetCore</c>, its server span). A persistent
    /// request's span is that span's child, and OpenTelemetry's default sampler (parent-based) drops the children of a
    /// parent nobody records: without it not one PersistentServices span of a request would be exported (found with a
    /// fresh app). OpenTelemetry.Instrumentation.AspNetCore's <c>AddAspNetCoreInstrumentation()</c> subscribes to the
    /// same source and adds its names and tags; both together are fine.
    /// </remarks>
    /// <param name="builder">The tracer provider builder (<c>WithTracing(t => ...)</c>).</param>
    /// <returns>The same builder.</returns>
    public static TracerProviderBuilder AddPersistentServicesInstrumentation(this TracerProviderBuilder builder)
    {
        ArgumentNullException.ThrowIfNull(builder);
        return builder.AddSource(PersistentServicesTelemetry.ActivitySourceName, AspNetCoreActivitySourceName);
    }

    /// <summary>ASP.NET Core's activity source (its server span, <c>Microsoft.AspNetCore.Hosting.HttpRequestIn</c>).</summary>
    private const string AspNetCoreActivitySourceName = "Microsoft.AspNetCore";
}
