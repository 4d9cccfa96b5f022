using System.Globalization;
using System.Text.RegularExpressions;
using k8s;
using k8s.Models;
using Microsoft.Extensions.Configuration;
using PersistentServices.Hosting;

namespace PersistentServices.Kubernetes.Tests;

/// <summary>
/// The replicated overlay (<c>samples/Bookstore/k8s/overlays/replicated</c>, docs/operations.md "Replicas and failover"):
/// every persistent service a group of three pods with automatic failover by Raft. Besides the deployment rules every
/// overlay keeps, each group's environment is built as Kubernetes builds it for each of its pods (the ConfigMap, then
/// the variables in order, <c>$(POD_NAME)</c> expanded from the downward API's pod name) and bound into
/// <see cref="PersistentServicesOptions"/> as the sample binds it, then validated as at startup: a key that does not
/// match an option, an address that does not name the pod, or a group the library would refuse fails here.
/// </summary>
public sealed partial class ReplicatedManifestTests
{
    private const string Overlay = $"{Bookstore.Overlays}/replicated";

    private static readonly string Prefix = $"PersistentServices__{nameof(PersistentServicesOptions.Replication)}__";
    private static readonly string FailoverKey = Prefix + nameof(ReplicationOptions.Failover);
    private static readonly string AddressKey = Prefix + nameof(ReplicationOptions.Address);
    private static readonly string InitialPrimaryKey = Prefix + nameof(ReplicationOptions.InitialPrimary);
    private static readonly string ReplicasKey = Prefix + nameof(ReplicationOptions.Replicas) + "__";
    private static readonly string PeerKeyKey = $"PersistentServices__{nameof(PersistentServicesOptions.Calls)}__{nameof(PersistentCallOptions.PeerKey)}";
    private static readonly string ServiceNameKey = $"PersistentServices__{nameof(PersistentServicesOptions.ServiceName)}";

    /// <summary>The bookstore's services that keep a log on a volume (the base's StatefulSets), each a group here.</summary>
    private static readonly string[] Groups = ["bookseller", "pricegrabber", "store-0", "store-1", "store-2"];

    [Fact]
    public async Task ReplicatedOverlay_ParsesStrictly_AndKeepsEveryRule()
    {
        var objects = await RenderAsync();

        var violations = Bookstore.Checker.Check(objects);

        Assert.True(violations.Count == 0, string.Join(Environment.NewLine, violations));
        Assert.Equal(
            ["ConfigMap bookstore", "Deployment gateway", "Deployment taxcalculator", "Namespace bookstore",
             "PodDisruptionBudget bookseller", "PodDisruptionBudget gateway", "PodDisruptionBudget pricegrabber",
             "PodDisruptionBudget store-0", "PodDisruptionBudget store-1", "PodDisruptionBudget store-2", "PodDisruptionBudget taxcalculator",
             "Service bookseller", "Service bookseller-primary", "Service gateway", "Service pricegrabber", "Service pricegrabber-primary",
             "Service store", "Service store-0-primary", "Service store-1-primary", "Service store-2-primary", "Service taxcalculator",
             "StatefulSet bookseller", "StatefulSet pricegrabber", "StatefulSet store-0", "StatefulSet store-1", "StatefulSet store-2"],
            objects.Select(o => $"{o.Kind} {o.Name()}").Order(StringComparer.Ordinal));
        var containers = objects.OfType<V1StatefulSet>().Select(s => s.Spec.Template).Concat(objects.OfType<V1Deployment>().Select(d => d.Spec.Template))
            .SelectMany(t => t.Spec.Containers).ToList();
        Assert.Equal(7, containers.Count);
        Assert.All(containers, c => Assert.Equal(("localhost/bookstore:dev", "Never"), (c.Image, c.ImagePullPolicy)));
    }

    [Theory]
    [InlineData("bookseller")]
    [InlineData("pricegrabber")]
    [InlineData("store-0")]
    [InlineData("store-1")]
    [InlineData("store-2")]
    public async Task EachGroup_IsAStatefulSetOfThree_WithItsOwnLogs_APrimaryOnlyService_AndABudget(string group)
    {
        var objects = await RenderAsync();
        var set = objects.OfType<V1StatefulSet>().Single(s => s.Name() == group);
        var spec = set.Spec;
        var labels = spec.Template.Metadata.Labels;

        Assert.Equal(3, spec.Replicas);
        Assert.Equal("Parallel", spec.PodManagementPolicy); // the replicas must start while the primary waits for them
        Assert.Equal("OnDelete", spec.UpdateStrategy?.Type); // a rolling update would wait for a replica to be ready
        Assert.True(spec.Selector.MatchLabels.All(l => labels.TryGetValue(l.Key, out var v) && v == l.Value));

        // One claim per pod, mounted where the log directory is (the checker holds its size to the log's worst case).
        var claim = Assert.Single(spec.VolumeClaimTemplates);
        var container = Assert.Single(spec.Template.Spec.Containers);
        var logDirectory = BuildEnvironment(objects, set, ordinal: 0)["PersistentServices__LogDirectory"];
        Assert.Contains(container.VolumeMounts, m => m.Name == claim.Name() && logDirectory.StartsWith(m.MountPath.TrimEnd('/') + "/", StringComparison.Ordinal));
        Assert.DoesNotContain(spec.Template.Spec.Volumes ?? [], v => v.Name == claim.Name());

        // The pods' DNS names: a headless Service that publishes not-ready pods (the replicas are never ready).
        var headless = objects.OfType<V1Service>().Single(s => s.Name() == spec.ServiceName);
        Assert.Equal(("None", true), (headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses));
        Assert.True(headless.Spec.Selector.All(l => labels.TryGetValue(l.Key, out var v) && v == l.Value));

        // The client-facing Service: every pod of the group and no other; only the ready one, the primary, gets traffic.
        var primary = objects.OfType<V1Service>().Single(s => s.Name() == $"{group}-primary");
        Assert.NotEqual("None", primary.Spec.ClusterIP);
        Assert.NotEqual(true, primary.Spec.PublishNotReadyAddresses);
        Assert.Equal([group], SelectedStatefulSets(objects, primary.Spec.Selector));

        // Readiness and liveness on the app's paths, apart (a replica is unready by design and live).
        Assert.Equal((Bookstore.Contract.ReadyPath, Bookstore.Contract.LivePath), (container.ReadinessProbe.HttpGet.Path, container.LivenessProbe.HttpGet.Path));

        // Spread over nodes, preferably: a node's loss takes one copy, and a one-node cluster still schedules the group.
        var spread = Assert.Single(spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution);
        Assert.Null(spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution);
        Assert.Equal("kubernetes.io/hostname", spread.PodAffinityTerm.TopologyKey);
        Assert.Equal(spec.Selector.MatchLabels, spread.PodAffinityTerm.LabelSelector.MatchLabels);

        // One budget selects the group (two would make every eviction fail), one pod at a time, replicas evictable.
        var budget = Assert.Single(objects.OfType<V1PodDisruptionBudget>(), b => b.Spec.Selector.MatchLabels.All(l => labels.TryGetValue(l.Key, out var v) && v == l.Value));
        Assert.Equal(("1", null), (budget.Spec.MaxUnavailable?.Value, budget.Spec.MinAvailable?.Value));
        Assert.Equal("AlwaysAllow", budget.Spec.UnhealthyPodEvictionPolicy);
    }

    [Theory]
    [InlineData("bookseller")]
    [InlineData("pricegrabber")]
    [InlineData("store-0")]
    [InlineData("store-1")]
    [InlineData("store-2")]
    public async Task EachPodsEnvironment_BindsToTheGroupThatTheLibraryWouldStart(string group)
    {
        var objects = await RenderAsync();
        var set = objects.OfType<V1StatefulSet>().Single(s => s.Name() == group);
        var env = Assert.Single(set.Spec.Template.Spec.Containers).Env;
        var port = int.Parse(BuildEnvironment(objects, set, 0)["ASPNETCORE_HTTP_PORTS"], CultureInfo.InvariantCulture);
        var ns = set.Namespace();
        Uri Node(int ordinal) => new($"http://{group}-{ordinal}.{set.Spec.ServiceName}.{ns}.svc.cluster.local:{port}");

        // POD_NAME from the downward API, declared before the address that uses it (else Kubernetes leaves $(POD_NAME)).
        var podName = env.ToList().FindIndex(e => e.Name == "POD_NAME");
        var address = env.ToList().FindIndex(e => e.Name == AddressKey);
        Assert.True(podName >= 0 && address > podName, $"POD_NAME at {podName}, {AddressKey} at {address}");
        Assert.Equal("metadata.name", env[podName].ValueFrom.FieldRef.FieldPath);
        Assert.Contains("$(POD_NAME)", env[address].Value, StringComparison.Ordinal);

        // The peer key (it signs shipments, promotions and Raft's messages) from the Secret the single-instance manifests use.
        var peerKey = env.Single(e => e.Name == PeerKeyKey).ValueFrom.SecretKeyRef;
        Assert.Equal(("bookstore-peer-key", "peer-key"), (peerKey.Name, peerKey.Key));

        var serviceNames = new HashSet<string>(StringComparer.Ordinal);
        for (var ordinal = 0; ordinal < 3; ordinal++)
        {
            var options = Bind(BuildEnvironment(objects, set, ordinal));
            var replication = options.Replication;

            Assert.Equal(FailoverMode.Raft, replication.Failover);
            Assert.Equal(Node(ordinal), replication.Address);
            Assert.Equal(Node(0), replication.InitialPrimary);
            Assert.Equal([Node(0), Node(1), Node(2)], replication.Replicas);
            Assert.Equal([.. Enumerable.Range(0, 3).Where(i => i != ordinal).Select(Node)], replication.Peers); // its own address skipped
            Assert.Equal(ordinal == 0 ? ReplicationRole.Primary : ReplicationRole.Replica, replication.ConfiguredRole);
            var validation = new PersistentServicesOptionsValidator().Validate(null, options);
            Assert.True(validation.Succeeded, $"{group}-{ordinal}: {validation.FailureMessage}");
            serviceNames.Add(options.ServiceName!);
        }

        // One service: the same name on every node (shipments and promotions are signed by and for it).
        Assert.Equal([group], serviceNames);
    }

    [Fact]
    public async Task Callers_ReachEachGroup_TheStoresThroughTheirPrimaryServices_TheGatewayThroughEveryNode()
    {
        var objects = await RenderAsync();
        var config = objects.OfType<V1ConfigMap>().Single(m => m.Name() == "bookstore");

        // Bookstore__Stores: each store's name (its group's ServiceName, what calls are signed for) and the Service that
        // routes to its primary.
        var stores = config.Data["Bookstore__Stores"].Split(';').Select(e => e.Split('=', 2)).ToDictionary(e => e[0], e => new Uri(e[1]));
        Assert.Equal(["store-0", "store-1", "store-2"], stores.Keys.Order(StringComparer.Ordinal));
        foreach (var (store, url) in stores)
        {
            var set = objects.OfType<V1StatefulSet>().Single(s => s.Name() == store);
            Assert.Equal(store, BuildEnvironment(objects, set, 0)[ServiceNameKey]);
            var host = url.Host.Split('.');
            Assert.Equal(set.Namespace(), host[1]);
            var service = objects.OfType<V1Service>().Single(s => s.Name() == host[0]);
            Assert.Equal([store], SelectedStatefulSets(objects, service.Spec.Selector));
            Assert.NotEqual("None", service.Spec.ClusterIP);
        }

        // The gateway: each persistent service's instance is its group's three nodes, as the nodes list them.
        var gateway = Assert.Single(objects.OfType<V1Deployment>().Single(d => d.Name() == "gateway").Spec.Template.Spec.Containers).Env;
        foreach (var service in new[] { "bookseller", "pricegrabber" })
        {
            var set = objects.OfType<V1StatefulSet>().Single(s => s.Name() == service);
            var replicas = Bind(BuildEnvironment(objects, set, 0)).Replication.Replicas;
            var instance = gateway.Single(e => e.Name == $"PersistentGateway__Services__{service}__Instances__0").Value;
            Assert.Equal(replicas, instance.Split(',').Select(u => new Uri(u)));
        }
    }

    [Fact]
    public async Task TheThreeStoreGroups_DifferOnlyInTheirNames()
    {
        var objects = await RenderAsync();

        var shapes = new[] { "store-0", "store-1", "store-2" }
            .SelectMany(g => new IKubernetesObject<V1ObjectMeta>[] { objects.OfType<V1StatefulSet>().Single(s => s.Name() == g), objects.OfType<V1PodDisruptionBudget>().Single(b => b.Name() == g), objects.OfType<V1Service>().Single(s => s.Name() == $"{g}-primary") }
                .Select(o => StoreName().Replace(KubernetesJson.Serialize(o), "store-N")))
            .Chunk(3)
            .ToList();

        Assert.Equal(shapes[0], shapes[1]);
        Assert.Equal(shapes[0], shapes[2]);
    }

    [Fact]
    public async Task TheSingleInstanceOverlays_ConfigureNoReplication()
    {
        foreach (var overlay in new[] { "local", "production" })
        {
            var objects = StrictManifestReader.Read(await Kustomize.BuildAsync(Kustomize.InRepository($"{Bookstore.Overlays}/{overlay}")));
            foreach (var set in objects.OfType<V1StatefulSet>())
            {
                var env = BuildEnvironment(objects, set, 0);
                Assert.DoesNotContain(env.Keys, k => k.StartsWith(Prefix, StringComparison.Ordinal));
                Assert.Equal(ReplicationRole.None, Bind(env).Replication.ConfiguredRole);
            }
        }
    }

    private static async Task<IReadOnlyList<IKubernetesObject<V1ObjectMeta>>> RenderAsync()
        => StrictManifestReader.Read(await Kustomize.BuildAsync(Kustomize.InRepository(Overlay)));

    private static List<string> SelectedStatefulSets(IReadOnlyList<IKubernetesObject<V1ObjectMeta>> objects, IDictionary<string, string> selector)
        => [.. objects.OfType<V1StatefulSet>().Where(s => selector.All(l => s.Spec.Template.Metadata.Labels.TryGetValue(l.Key, out var v) && v == l.Value)).Select(s => s.Name())];

    /// <summary>
    /// The environment of pod <c>&lt;set&gt;-&lt;ordinal&gt;</c> as the kubelet builds it: the ConfigMaps of <c>envFrom</c>,
    /// then each variable of <c>env</c> in order, <c>$(NAME)</c> expanded from the variables defined before it
    /// (<c>$$</c> escapes), unknown references left as they are. <c>metadata.name</c> is the pod's name; a Secret's
    /// value is a stand-in key.
    /// </summary>
    private static Dictionary<string, string> BuildEnvironment(IReadOnlyList<IKubernetesObject<V1ObjectMeta>> objects, V1StatefulSet set, int ordinal)
    {
        var container = Assert.Single(set.Spec.Template.Spec.Containers);
        var env = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var source in container.EnvFrom ?? [])
        {
            var map = objects.OfType<V1ConfigMap>().Single(m => m.Name() == source.ConfigMapRef.Name && m.Namespace() == set.Namespace());
            foreach (var (key, value) in map.Data)
            {
                env[(source.Prefix ?? "") + key] = value;
            }
        }

        foreach (var variable in container.Env ?? [])
        {
            if (variable.ValueFrom is { } from)
            {
                if (from.FieldRef is { } field)
                {
                    Assert.Equal("metadata.name", field.FieldPath);
                    env[variable.Name] = $"{set.Name()}-{ordinal}";
                }
                else if (from.SecretKeyRef is { Optional: not true })
                {
                    env[variable.Name] = "a stand-in for the Secret's key, long enough for the library";
                }

                continue;
            }

            var defined = new Dictionary<string, string>(env, StringComparer.Ordinal);
            env[variable.Name] = Reference().Replace(variable.Value ?? "", m => m.Value.StartsWith("$$", StringComparison.Ordinal)
                ? m.Value[1..]
                : defined.TryGetValue(m.Groups["name"].Value, out var value) ? value : m.Value);
        }

        return env;
    }

    /// <summary>What <c>ComponentHost</c> does: the section <c>PersistentServices</c> bound into the options.</summary>
    private static PersistentServicesOptions Bind(IReadOnlyDictionary<string, string> env)
    {
        // The environment-variable provider's rule: "__" is the section separator.
        var configuration = new ConfigurationBuilder()
            .AddInMemoryCollection(env.Select(e => new KeyValuePair<string, string?>(e.Key.Replace("__", ":", StringComparison.Ordinal), e.Value)))
            .Build();
        var options = new PersistentServicesOptions();
        configuration.GetSection("PersistentServices").Bind(options);
        return options;
    }

    [GeneratedRegex(@"\$?\$\((?<name>[A-Za-z_][A-Za-z0-9_.-]*)\)")]
    private static partial Regex Reference();

    [GeneratedRegex(@"store-[0-2]")]
    private static partial Regex StoreName();
}
