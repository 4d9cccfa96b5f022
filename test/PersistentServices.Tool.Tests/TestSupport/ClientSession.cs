using System.Globalization;
using System.Net.Http.Json;

namespace PersistentServices.Tool.Tests.TestSupport;

/// <summary>The reply of <c>POST /ps/sessions</c>.</summary>
internal sealed record SessionReply(string SessionId);

/// <summary>The reply of the sample's <c>GET /counter</c>: the session's total and the executed deposits, in order.</summary>
internal sealed record CounterState(long Total, List<string> Operations);

/// <summary>
/// One client session of the sample's counter: deposits in order (PS-Seq 1, 2, ...), never retried, and what was
/// acknowledged. <paramref name="tolerateFailure"/>: a failed request (the service was killed) ends the session quietly,
/// its deposit left <see cref="InFlight"/>.
/// </summary>
internal sealed class ClientSession(string id, int deposits, bool tolerateFailure)
{
    private readonly Lock _gate = new();
    private readonly List<(string OpId, long Amount)> _acknowledged = [];

    public string Id { get; } = id;

    /// <summary>The acknowledged deposits, in order (a copy).</summary>
    public List<(string OpId, long Amount)> Acknowledged
    {
        get
        {
            lock (_gate)
            {
                return [.. _acknowledged];
            }
        }
    }

    /// <summary>A deposit sent but not acknowledged when the session stopped.</summary>
    public (string OpId, long Amount)? InFlight { get; private set; }

    public async Task DepositAsync(HttpClient client, Uri service, Random random, CancellationToken stop)
    {
        for (var sequence = 1; sequence <= deposits && !stop.IsCancellationRequested; sequence++)
        {
            var deposit = ($"{Id[..8]}-{sequence}", (long)random.Next(1, 1000));
            using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(service, "/counter/add"))
            {
                Content = JsonContent.Create(new { opId = deposit.Item1, amount = deposit.Item2 }),
            };
            request.Headers.Add("PS-Session", Id);
            request.Headers.Add("PS-Seq", sequence.ToString(CultureInfo.InvariantCulture));
            InFlight = deposit;
            HttpResponseMessage response;
            try
            {
                response = await client.SendAsync(request, CancellationToken.None);
            }
            catch (HttpRequestException) when (tolerateFailure)
            {
                return; // killed while this deposit was in flight
            }

            using (response)
            {
                if (!response.IsSuccessStatusCode && tolerateFailure)
                {
                    return;
                }

                response.EnsureSuccessStatusCode();
            }

            lock (_gate)
            {
                _acknowledged.Add(deposit);
            }

            InFlight = null;
        }
    }
}
