using System.Diagnostics;
using System.Globalization;

namespace Bookstore.Launcher;

/// <summary>
/// The buyer's request latencies (first send to final answer), split by whether a service was restarting while the
/// request was out: what a restart adds is the difference (README.md, "Chaos" and "Upgrades").
/// </summary>
internal sealed record Latency(int Steady, double SteadyP50, double SteadyP99, int DuringRestarts, double RestartP50, double RestartP99, double RestartMax, int Outages, double OutageP50, double OutageMax)
{
    public static Latency Measure(IReadOnlyList<(long Sent, long Answered)> requests, IReadOnlyList<(long From, long To)> outages)
    {
        (long From, long To)[] windows;
        lock (outages)
        {
            windows = [.. outages];
        }

        var steady = new List<double>();
        var during = new List<double>();
        foreach (var (sent, answered) in requests)
        {
            var milliseconds = Stopwatch.GetElapsedTime(sent, answered).TotalMilliseconds;
            (windows.Any(w => sent < w.To && answered > w.From) ? during : steady).Add(milliseconds);
        }

        var outageTimes = windows.Select(w => Stopwatch.GetElapsedTime(w.From, w.To).TotalMilliseconds).ToList();
        return new Latency(
            steady.Count, Percentile(steady, 0.50), Percentile(steady, 0.99),
            during.Count, Percentile(during, 0.50), Percentile(during, 0.99), during.Count == 0 ? 0 : during.Max(),
            windows.Length, Percentile(outageTimes, 0.50), outageTimes.Count == 0 ? 0 : outageTimes.Max());
    }

    public string Describe()
    {
        var steady = string.Create(CultureInfo.InvariantCulture, $"latency: {Steady} requests with every service up p50 {SteadyP50:0.0} ms p99 {SteadyP99:0.0} ms; ");
        return steady + (DuringRestarts == 0
            ? "none during a restart"
            : string.Create(CultureInfo.InvariantCulture, $"{DuringRestarts} during a restart p50 {RestartP50:0.0} ms p99 {RestartP99:0.0} ms max {RestartMax:0.0} ms; {Outages} restarts, kill or stop to ready p50 {OutageP50:0.0} ms max {OutageMax:0.0} ms"));
    }

    private static double Percentile(List<double> values, double p)
    {
        if (values.Count == 0)
        {
            return 0;
        }

        values.Sort();
        return values[Math.Min(values.Count - 1, (int)Math.Ceiling(p * values.Count) - 1)];
    }
}
