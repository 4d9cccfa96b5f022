using k8s.Models;

namespace PersistentServices.Kubernetes.Tests;

/// <summary>The reader refuses what an API server refuses: unknown kinds and fields, wrong types, duplicate keys.</summary>
public sealed class StrictManifestReaderTests
{
    private const string Pod = """
        apiVersion: v1
        kind: Pod
        metadata:
          name: p
        spec:
          terminationGracePeriodSeconds: 50
          containers:
            - name: c
              image: i:1
              ports:
                - { name: http, containerPort: 8080 }
              env:
                - { name: DOTNET_SHUTDOWNTIMEOUTSECONDS, value: "40" }
              readinessProbe:
                httpGet: { path: /health/ready, port: http }
              resources:
                limits: { memory: 256Mi }
        """;

    [Fact]
    public void Read_AValidManifest_GivesItsModelTypes()
    {
        var objects = StrictManifestReader.Read(Pod + "\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: { name: s }\nspec: { selector: {}, template: {}, serviceName: s }\n---\n");

        var pod = Assert.IsType<V1Pod>(objects[0]);
        Assert.IsType<V1StatefulSet>(objects[1]);
        Assert.Equal(2, objects.Count);
        Assert.Equal(50, pod.Spec.TerminationGracePeriodSeconds);
        Assert.Equal(8080, pod.Spec.Containers[0].Ports[0].ContainerPort);
        Assert.Equal("40", pod.Spec.Containers[0].Env[0].Value);
        Assert.Equal("http", pod.Spec.Containers[0].ReadinessProbe.HttpGet.Port.Value);
        Assert.Equal(256m * 1024 * 1024, pod.Spec.Containers[0].Resources.Limits["memory"].ToDecimal());
    }

    [Theory]
    [InlineData("readinessProbe:", "readinesProbe:", "'readinesProbe' could not be mapped")]                     // an unknown field
    [InlineData("terminationGracePeriodSeconds:", "terminationGracePeriod:", "'terminationGracePeriod' could not be mapped")]
    [InlineData("containerPort: 8080", "containerPort: \"8080\"", "could not be converted to System.Int32")]       // a string for a number
    [InlineData("value: \"40\"", "value: 40", "could not be converted to System.String")]                          // a number for a string
    [InlineData("value: \"40\"", "value: yes", "could not be converted to System.String")]                         // YAML 1.1's boolean
    [InlineData("terminationGracePeriodSeconds: 50", "terminationGracePeriodSeconds: 50.5", "System.Nullable`1[System.Int64]")]
    [InlineData("memory: 256Mi", "memory: 256Mo", "quantity")]                                                     // no such unit
    [InlineData("kind: Pod", "kind: Podd", "no such API type 'v1/Podd'")]
    [InlineData("apiVersion: v1", "apiVersion: v2", "no such API type 'v2/Pod'")]
    [InlineData("\n  containers:", "\n  containers:\n    - name: c2\n  containers:", "Duplicate key containers")]   // a key twice
    public void Read_AManifestAClusterWouldRefuse_Throws(string find, string replace, string expected)
    {
        var yaml = Pod.Replace(find, replace, StringComparison.Ordinal);
        Assert.NotEqual(Pod, yaml);

        var error = Assert.ThrowsAny<Exception>(() => StrictManifestReader.Read(yaml));

        Assert.Contains(expected, error.ToString(), StringComparison.Ordinal);
    }
}
