using System.Diagnostics;
using System.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Mvc.ApplicationParts;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using OpenTelemetry;
using OpenTelemetry.Metrics;
using OpenTelemetry.Trace;
using PersistentServices.Diagnostics;

namespace PersistentServices.Testing.Tests;

/// <summary>
/// One request of the quick start's service, in process, through the OpenTelemetry SDK with the in-memory exporter and
/// nothing but <c>AddPersistentServicesInstrumentation()</c> and ASP.NET Core's instrumentation: the spans and the metrics
/// docs/telemetry.md describes.
/// </summary>
[Collection(InProcessHost.Name)]
public sealed class TelemetryTests
{
    private static CancellationToken Cancel => TestContext.Current.CancellationToken;

    [Fact]
    public async Task OneRequestAndItsRetry_ExportSpansAndMetrics()
    {
        var spans = new List<Activity>();
        var metrics = new List<Metric>();
        using var log = new TempFolder();
        var builder = WebApplication.CreateBuilder();
        builder.Logging.ClearProviders();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Services.AddControllers().ConfigureApplicationPartManager(parts =>
        {
            parts.ApplicationParts.Clear();
            parts.ApplicationParts.Add(new AssemblyPart(typeof(QuickStart.Controllers.CartController).Assembly));
        });
        builder.Services.AddPersistentServices(o => o.LogDirectory = log.Path);
        builder.Services.AddOpenTelemetry()
            .WithTracing(t => t.AddPersistentServicesInstrumentation().AddAspNetCoreInstrumentation().AddInMemoryExporter(spans))
            .WithMetrics(m => m.AddPersistentServicesInstrumentation().AddInMemoryExporter(metrics));
        await using var app = builder.Build();
        app.UsePersistentServices();
        app.MapControllers();
        await app.StartAsync(Cancel);
        var address = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.Single();
        using var client = new HttpClient { BaseAddress = new Uri(address) };

        using var start = await client.PostAsync(new Uri("/ps/sessions", UriKind.Relative), null, Cancel);
        var session = start.Headers.GetValues("PS-Session").Single();
        for (var attempt = 0; attempt < 2; attempt++)
        {
            using var request = new HttpRequestMessage(HttpMethod.Post, "/cart/items?sku=book");
            request.Headers.Add("PS-Session", session);
            request.Headers.Add("PS-Seq", "1");
            using var response = await client.SendAsync(request, Cancel);
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        }

        app.Services.GetRequiredService<TracerProvider>().ForceFlush();
        app.Services.GetRequiredService<MeterProvider>().ForceFlush();
        await app.StopAsync(Cancel);

        TestContext.Current.TestOutputHelper?.WriteLine(SpanTree(spans));

        // Spans: each persistent request under ASP.NET Core's server span; the first waits for the log, the retry does not.
        var requests = spans.Where(s => s.OperationName == "persistentservices.request").ToList();
        Assert.Equal(2, requests.Count);
        Assert.All(requests, r => Assert.Equal("Microsoft.AspNetCore.Hosting.HttpRequestIn", spans.Single(s => s.SpanId == r.ParentSpanId).OperationName));
        Assert.Equal(["executed", "duplicate"], requests.Select(r => (string?)r.GetTagItem("persistentservices.admission")));
        Assert.All(requests, r => Assert.Equal(PersistentServicesTelemetry.ActivitySourceName, r.Source.Name));
        Assert.Matches("^[0-9a-f]{12}$", (string)requests[0].GetTagItem("persistentservices.session")!);
        Assert.Equal(1L, requests[0].GetTagItem("persistentservices.sequence"));
        var force = Assert.Single(spans, s => s.OperationName == "persistentservices.log.force");
        Assert.Equal(requests[0].SpanId, force.ParentSpanId);

        // Metrics: the requests by outcome, the log's commits, and a commit duration in seconds in sub-millisecond buckets.
        var byName = metrics.GroupBy(m => m.Name).ToDictionary(g => g.Key, g => g.Last());
        Assert.Equal(PersistentServicesTelemetry.MeterName, byName["persistentservices.requests"].MeterName);
        var outcomes = Points(byName["persistentservices.requests"])
            .ToDictionary(p => Tag(p, "outcome"), p => p.GetSumLong());
        Assert.Equal(1, outcomes["executed"]);
        Assert.Equal(1, outcomes["duplicate"]);
        Assert.True(Points(byName["persistentservices.log.commits"]).Sum(p => p.GetSumLong()) >= 1);
        var duration = byName["persistentservices.log.commit.duration"];
        Assert.Equal("s", duration.Unit);
        var bounds = new List<double>();
        foreach (var bucket in Points(duration).First().GetHistogramBuckets())
        {
            bounds.Add(bucket.ExplicitBound);
        }

        Assert.Equal(0.0001, bounds[0]);
        Assert.Contains(byName, m => m.Key == "persistentservices.sessions.live");
    }

    [Fact]
    public async Task WithoutAspNetCoreInstrumentation_ARequestsSpansAreStillExported()
    {
        // A fresh app's three lines: only AddPersistentServicesInstrumentation(). Before it listened to ASP.NET Core's
        // source too, the parent-based sampler dropped every persistentservices.request (its parent was not recorded).
        var spans = new List<Activity>();
        using var root = new TempFolder();
        await using var app = await StartServiceAsync("A", root.Path, callee: null, spans, aspNetCoreInstrumentation: false);
        using var client = new HttpClient { BaseAddress = new Uri(app.Urls.Single()) };
        using var start = await client.PostAsync(new Uri("/ps/sessions", UriKind.Relative), null, Cancel);
        using var request = new HttpRequestMessage(HttpMethod.Post, "/b");
        request.Headers.Add("PS-Session", start.Headers.GetValues("PS-Session").Single());
        request.Headers.Add("PS-Seq", "1");
        using var response = await client.SendAsync(request, Cancel);
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        app.Services.GetRequiredService<TracerProvider>().ForceFlush();

        var persistent = Assert.Single(spans, s => s.OperationName == "persistentservices.request");
        Assert.Equal("Microsoft.AspNetCore.Hosting.HttpRequestIn", spans.Single(s => s.SpanId == persistent.ParentSpanId).OperationName);
        Assert.Single(spans, s => s.OperationName == "persistentservices.log.force" && s.ParentSpanId == persistent.SpanId);
    }

    [Fact]
    public async Task APersistentCall_IsTracedFromTheCallersRequestIntoTheCallees()
    {
        var spans = new List<Activity>();
        using var root = new TempFolder();
        await using var b = await StartServiceAsync("B", Path.Combine(root.Path, "b"), callee: null, spans: null);
        await using var a = await StartServiceAsync("A", Path.Combine(root.Path, "a"), callee: new Uri(b.Urls.Single()), spans);
        using var client = new HttpClient { BaseAddress = new Uri(a.Urls.Single()) };
        using var start = await client.PostAsync(new Uri("/ps/sessions", UriKind.Relative), null, Cancel);
        using var request = new HttpRequestMessage(HttpMethod.Post, "/a");
        request.Headers.Add("PS-Session", start.Headers.GetValues("PS-Session").Single());
        request.Headers.Add("PS-Seq", "1");
        using var response = await client.SendAsync(request, Cancel);
        Assert.Equal("42", await response.Content.ReadAsStringAsync(Cancel));
        a.Services.GetRequiredService<TracerProvider>().ForceFlush();

        var tree = SpanTree(spans);
        TestContext.Current.TestOutputHelper?.WriteLine(tree);
        var requests = spans.Where(s => s.OperationName == "persistentservices.request").ToList();
        Assert.Equal(2, requests.Count);
        var (callerRequest, calleeRequest) = requests[0].StartTimeUtc < requests[1].StartTimeUtc ? (requests[0], requests[1]) : (requests[1], requests[0]);
        Activity Parent(Activity span) => spans.Single(s => s.SpanId == span.ParentSpanId);

        // caller's server span > caller's persistentservices.request > HttpClient's span > callee's server span > callee's request
        Assert.Equal("Microsoft.AspNetCore.Hosting.HttpRequestIn", Parent(callerRequest).OperationName);
        var calleeServer = Parent(calleeRequest);
        Assert.Equal("Microsoft.AspNetCore.Hosting.HttpRequestIn", calleeServer.OperationName);
        var outgoing = Parent(calleeServer);
        Assert.Equal("System.Net.Http", outgoing.Source.Name);
        Assert.Equal(callerRequest.SpanId, Parent(outgoing).SpanId);
        Assert.Equal(callerRequest.TraceId, calleeRequest.TraceId);
        Assert.Contains(spans, s => s.OperationName == "persistentservices.log.force" && s.ParentSpanId == callerRequest.SpanId);
    }

    private static async Task<WebApplication> StartServiceAsync(string name, string log, Uri? callee, List<Activity>? spans, bool aspNetCoreInstrumentation = true)
    {
        var builder = WebApplication.CreateBuilder();
        builder.Logging.ClearProviders();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Services.AddPersistentServices(o =>
        {
            o.LogDirectory = log;
            o.ServiceName = name;
            o.Calls.PeerKey = "telemetry-test-peer-key-0123456789-abcdefghij";
        });
        builder.Services.AddHttpClient("b", c => c.BaseAddress = callee ?? new Uri("http://127.0.0.1:9")).AddPersistentCalls("B");
        if (spans is not null)
        {
            // One tracer provider for both services: an ActivityListener hears every source in the process.
            builder.Services.AddOpenTelemetry().WithTracing(t =>
            {
                t.AddPersistentServicesInstrumentation().AddSource("System.Net.Http").AddInMemoryExporter(spans);
                if (aspNetCoreInstrumentation)
                {
                    t.AddAspNetCoreInstrumentation();
                }
            });
        }

        var app = builder.Build();
        app.UsePersistentServices();
        app.MapPost("/b", [Persistent] () => 42L);
        app.MapPost("/a", [Persistent] async (IHttpClientFactory clients) =>
        {
            using var reply = await clients.CreateClient("b").PostAsync(new Uri("/b", UriKind.Relative), null);
            return long.Parse(await reply.Content.ReadAsStringAsync(), System.Globalization.CultureInfo.InvariantCulture);
        });
        await app.StartAsync(Cancel);
        return app;
    }

    private static List<MetricPoint> Points(Metric metric)
    {
        var points = new List<MetricPoint>();
        foreach (ref readonly var point in metric.GetMetricPoints())
        {
            points.Add(point);
        }

        return points;
    }

    private static string Tag(MetricPoint point, string name)
    {
        foreach (var tag in point.Tags)
        {
            if (tag.Key == name)
            {
                return tag.Value?.ToString() ?? "";
            }
        }

        return "";
    }

    private static string SpanTree(List<Activity> spans)
    {
        var text = new System.Text.StringBuilder();
        void Write(Activity span, int depth)
        {
            text.Append(' ', depth * 2).Append(span.Source.Name).Append(": ").Append(span.DisplayName)
                .Append(" [").AppendJoin(", ", span.TagObjects.Select(t => $"{t.Key}={t.Value}")).AppendLine("]");
            foreach (var child in spans.Where(s => s.ParentSpanId == span.SpanId))
            {
                Write(child, depth + 1);
            }
        }

        foreach (var root in spans.Where(s => !spans.Any(p => p.SpanId == s.ParentSpanId)))
        {
            Write(root, 0);
        }

        return text.ToString();
    }
}

/// <summary>Tests that host PersistentServices inside the test process run one at a time (shared variables are process-wide).</summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class InProcessHost
{
    public const string Name = "in-process host";
}
