using System.Diagnostics;
using System.Globalization;
using System.Net.Http.Json;

/// <summary>A small latency and throughput measurement of the three ways to call a persistent endpoint (docs/benchmarks.md).</summary>
internal static class Bench
{
    public static async Task RunAsync(string spec, IHttpClientFactory factory, string serviceUrl, int callers, string store)
    {
        var parts = spec.Split(':');
        var mode = parts[0];
        var requests = int.Parse(parts[1], CultureInfo.InvariantCulture);
        using var plain = new HttpClient { BaseAddress = new Uri(serviceUrl) };
        var latencies = new List<double>();
        var run = Guid.NewGuid().ToString("N")[..6];

        async Task<double> OneAsync(int caller, int i)
        {
            var account = $"bench-{run}-{caller}";
            using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = JsonContent.Create(new { account, amount = 1 }) };
            var started = Stopwatch.GetTimestamp();
            HttpResponseMessage response;
            switch (mode)
            {
                case "persistent":
                    using (var http = factory.CreateClient("svc"))
                    {
                        response = await http.SendAsync(request);
                    }

                    break;
                case "key":
                    request.Headers.TryAddWithoutValidation("Idempotency-Key", $"{run}-{caller}-{i}");
                    response = await plain.SendAsync(request);
                    break;
                default:
                    // A plain client needs a session of its own to reach a [Persistent] endpoint: one per caller, numbered by hand.
                    request.Headers.TryAddWithoutValidation("PS-Session", Sessions[caller]);
                    request.Headers.TryAddWithoutValidation("PS-Seq", (i + 1).ToString(CultureInfo.InvariantCulture));
                    response = await plain.SendAsync(request);
                    break;
            }

            using (response)
            {
                response.EnsureSuccessStatusCode();
                await response.Content.ReadAsByteArrayAsync();
            }

            return Stopwatch.GetElapsedTime(started).TotalMilliseconds;
        }

        if (mode == "plain")
        {
            for (var c = 0; c < callers; c++)
            {
                using var created = await plain.PostAsync("/ps/sessions", null);
                Sessions[c] = created.Headers.GetValues("PS-Session").Single();
            }
        }

        // Warm-up (JIT, connections, sessions), not measured.
        await Task.WhenAll(Enumerable.Range(0, callers).Select(c => OneAsync(c, 0)));
        var total = Stopwatch.StartNew();
        var perCaller = await Task.WhenAll(Enumerable.Range(0, callers).Select(async c =>
        {
            var mine = new List<double>(requests);
            for (var i = 1; i <= requests; i++)
            {
                mine.Add(await OneAsync(c, i));
            }

            return mine;
        }));
        total.Stop();
        latencies.AddRange(perCaller.SelectMany(l => l));
        latencies.Sort();
        var storeBytes = Directory.Exists(store) ? Directory.GetFiles(store).Sum(f => new FileInfo(f).Length) : 0;
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"{mode} callers={callers} requests={latencies.Count} p50={latencies[latencies.Count / 2]:F2}ms p99={latencies[(int)(latencies.Count * 0.99)]:F2}ms " +
            $"throughput={latencies.Count / total.Elapsed.TotalSeconds:F0}/s store-bytes={storeBytes}"));
    }

    private static readonly Dictionary<int, string> Sessions = [];
}
