using System.Globalization;
using System.Net;
using System.Text;

/// <summary>
/// A client that is not ours (curl-style): each operation is POST /deposit with <c>Idempotency-Key: &lt;op&gt;</c>, sent
/// again with the same key on any failure, 503 or 409 until it gets a reply. It keeps nothing itself: after a crash the
/// caller sends again every operation it has no printed reply for.
/// </summary>
internal static class KeyClient
{
    private static readonly string? Armed = Environment.GetEnvironmentVariable("PS_KEY_CRASH_POINT");
    private static int _pass = int.TryParse(Environment.GetEnvironmentVariable("PS_KEY_CRASH_AFTER"), out var n) ? n : 0;

    public static async Task RunAsync(string serviceUrl, string[] ops, int concurrency, Action<string, string?, int, string> print)
    {
        using var http = new HttpClient { BaseAddress = new Uri(serviceUrl), Timeout = TimeSpan.FromSeconds(10) };
        await Parallel.ForEachAsync(ops, new ParallelOptions { MaxDegreeOfParallelism = concurrency }, async (op, ct) =>
        {
            var body = Encoding.UTF8.GetBytes($"{{\"account\":\"{op}\",\"amount\":1}}");
            Hit("key.request.created");
            for (var attempt = 0; ; attempt++)
            {
                try
                {
                    using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = new FlushedContent(body) };
                    request.Content.Headers.ContentType = new("application/json");
                    request.Headers.TryAddWithoutValidation("Idempotency-Key", op);
                    using var response = await http.SendAsync(request, ct);
                    var text = await response.Content.ReadAsStringAsync(ct);
                    if (response.StatusCode == HttpStatusCode.OK)
                    {
                        Hit("key.reply.received");
                        print("delivered", op, 200, text);
                        return;
                    }

                    if (response.StatusCode is not (HttpStatusCode.ServiceUnavailable or HttpStatusCode.Conflict or HttpStatusCode.TooManyRequests))
                    {
                        print("failed", op, (int)response.StatusCode, text);
                        return;
                    }
                }
                catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException or IOException)
                {
                }

                await Task.Delay(Math.Min(300, 20 << Math.Min(attempt, 4)), ct);
            }
        });
    }

    private static void Hit(string point)
    {
        if (Armed != point || Interlocked.Decrement(ref _pass) >= 0)
        {
            return;
        }

        Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture, $"crash point {point}: SIGKILL"));
        Console.Error.Flush();
        System.Diagnostics.Process.GetCurrentProcess().Kill();
        Thread.Sleep(Timeout.Infinite);
    }

    /// <summary>The body, written and flushed to the connection, then the crash point <c>key.request.sent</c>.</summary>
    private sealed class FlushedContent(byte[] body) : HttpContent
    {
        protected override async Task SerializeToStreamAsync(Stream stream, System.Net.TransportContext? context)
        {
            await stream.WriteAsync(body);
            await stream.FlushAsync();
            Hit("key.request.sent");
        }

        protected override bool TryComputeLength(out long length)
        {
            length = body.Length;
            return true;
        }
    }
}
